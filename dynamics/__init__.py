"""walklab dynamics: pure computation on multibody models (no I/O except model loading).

Tree models (docs/models.md): `Model` and its parts, `load_model` (walklab TOML; a linkage file
goes to `dynamics.linkage`), `load_urdf` / `save_urdf` (Pinocchio's joint order and layouts).
Algorithms, batched over time (q (nq,) or (N, nq), v and a (nv,) or (N, nv)):
`rnea` (with external `Wrench`es), `nonlinear_effects`, `generalized_gravity`, `crba`,
`aba`, `forward_dynamics`, `forward_kinematics`, `point_kinematics`, `marker_positions`,
`contact_positions`, `point_jacobians`, `frame_jacobian`, `com`, `centroidal_momentum`,
`configuration_derivative`.
"""
from .aba import aba
from .centroidal import centroidal_momentum
from .com import com
from .crba import crba
from .forward_dynamics import forward_dynamics
from .joints import configuration_derivative
from .kinematics import (contact_positions, forward_kinematics, frame_jacobian, marker_positions,
                         point_jacobians, point_kinematics)
from .loader import load_model, model_from_dict
from .model import Actuator, Joint, Model, ModelError, Segment
from .rnea import Wrench, generalized_gravity, nonlinear_effects, rnea
from .urdf import load_urdf, model_from_urdf_string, save_urdf, urdf_string

__all__ = [
    "Actuator", "Joint", "Model", "ModelError", "Segment", "Wrench",
    "aba", "centroidal_momentum", "com", "configuration_derivative", "contact_positions", "crba",
    "forward_dynamics", "forward_kinematics", "frame_jacobian", "generalized_gravity", "load_model",
    "load_urdf", "marker_positions", "model_from_dict", "model_from_urdf_string", "nonlinear_effects",
    "point_jacobians", "point_kinematics", "rnea", "save_urdf", "urdf_string",
]
