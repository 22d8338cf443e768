"""LightningModules with federated-learning hook points, and a model registry."""

from lightning_modules.base import FLModule
from lightning_modules.flat_params import ParamLayout, bind_flat_parameters
from lightning_modules.hooks import ClientTerms
from lightning_modules.registry import MODEL_NAMES, build_model

__all__ = [
    "FLModule",
    "ParamLayout",
    "bind_flat_parameters",
    "ClientTerms",
    "MODEL_NAMES",
    "build_model",
]
