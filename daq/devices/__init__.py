"""Device daemons: one module per kind of device, each a `daq.context.Source` run by `daq.context.serve`
(see docs/devices.md): ``forceboard`` (a serial amplifier / load-cell board speaking the firmware
bridge's FORCE message), ``mocap`` (markers from a motion-capture PC over ZeroMQ)."""
