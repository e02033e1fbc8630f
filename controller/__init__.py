"""Experiment orchestration: the `walklab` command, lab configs, the supervisor, synergies and the control loop."""
