"""LightningModules with federated-learning hook points, and a model registry.

The names below load on first use (PEP 562): importing ``lightning_modules.flat_params`` or
``lightning_modules.hooks`` must not import Lightning, which takes seconds.
"""

from __future__ import annotations

from fedsim.plugins import lazy_exports

_EXPORTS = {
    "FLModule": "lightning_modules.base",
    "ParamLayout": "lightning_modules.flat_params",
    "bind_flat_parameters": "lightning_modules.flat_params",
    "ClientTerms": "lightning_modules.hooks",
    "MODEL_NAMES": "lightning_modules.registry",
    "build_model": "lightning_modules.registry",
}

__all__ = list(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
