"""LightningModules with federated-learning hook points, and a model registry.

The names below load on first use (PEP 562): importing ``lightning_modules.flat_params`` or
``lightning_modules.hooks`` must not import Lightning, which takes seconds.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FLModule": "lightning_modules.base",
    "ParamLayout": "lightning_modules.flat_params",
    "bind_flat_parameters": "lightning_modules.flat_params",
    "ClientTerms": "lightning_modules.hooks",
    "MODEL_NAMES": "lightning_modules.registry",
    "build_model": "lightning_modules.registry",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'lightning_modules' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
