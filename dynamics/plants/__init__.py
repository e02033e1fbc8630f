"""Physics plants of the simulated worlds: pure computation, stepped by the simulators.

- `dynamics.plants.motor`: the geared DC motor of the virtual MCU (armature circuit and shaft,
  batched over motors), with a load callback at its output shaft;
- `dynamics.plants.crank`: the load a Jansen leg or walker puts on its crank (reduced form of
  every leg, penalty ground contact), `motor_load` being that callback;
- `dynamics.plants.jansen_world`: the simulated world of the walker — a free chassis (x, height,
  pitch) carried by its legs on the ground, two crank shafts, plates and markers as instruments;
  `JansenSim.load` is the shafts' motor callback.
"""
