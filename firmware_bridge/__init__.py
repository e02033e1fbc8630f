"""The serial protocol to the robot's microcontroller: framing, CRC, messages, host link, virtual MCU."""
