"""walklab dynamics: pure computation on multibody models (no I/O except model loading).

Tree models: `Model` (dynamics.model), `load_model` (TOML, docs/models.md), `load_urdf` /
`save_urdf`; algorithms batched over time (inputs (nq,) or (N, nq)).
"""
from .loader import load_model, model_from_dict
from .model import Actuator, Joint, Model, ModelError, Segment

__all__ = ["Actuator", "Joint", "Model", "ModelError", "Segment", "load_model", "model_from_dict"]
