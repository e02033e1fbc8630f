"""Acquisition: the frame schema, the ZeroMQ bus, device daemons, clocks, recording and file formats."""
