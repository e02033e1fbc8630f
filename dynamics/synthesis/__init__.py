"""Offline synthesis of nominal motions for the controller (methods.md j, e.9, l): pure computation.

One algorithm per module: `crank` (Theo-Jansen walker crank-angle programmes, constant and
speed-profiled, with feed-forward torques from the reduced one-DOF tables and expected foot forces
under a viscoelastic contact law), `transition` (the quintic spline of defect 3 of methods.md j.6
and setpoint blends between nominals), `biped` (semi-inverse nominals: prescribed leg synergy,
compensating trunk synergy so the ZMP follows its law, periodic shooting and collocation).
No I/O here: the controller's synergy library stores what these functions return.
"""
