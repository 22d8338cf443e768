"""Where a LoRA adapter's matrices sit in the flat vector, for the adapter methods: read from
what the model declares (``FederationInfo.adapters``, ``lightning_modules/adapters.py``),
never parsed from parameter names.

Each adapted linear module has A (r x in) and B (out x r), whose product (scaled by
alpha / r) is the module's update, and, in the variant an algorithm asked for, a residual
(out x in) or a personal A and B. An algorithm that acts on adapters refuses a model that
declares none in one line (``require_lora``).
"""

from __future__ import annotations

from fedsim.algorithms.seam import FederationInfo
from fedsim.errors import ConfigError
from lightning_modules.adapters import AdapterParts, LoraModule

__all__ = ["LoraModule", "a_names", "b_names", "require_lora", "residual_names"]


def require_lora(federation: FederationInfo, algorithm: str) -> list[LoraModule]:
    """The adapted modules the model declares; a ConfigError in one line if there are none."""
    parts: AdapterParts | None = federation.adapters
    if parts is None or not parts.modules:
        raise ConfigError(
            "algorithm.name", algorithm, "acts on the A and B matrices of a LoRA adapter, and "
            "the model declares none (no adapter_parts): set model.name=causal_lm",
        )  # fmt: skip
    return list(parts.modules)


def a_names(modules: list[LoraModule]) -> list[str]:
    return [m.a for m in modules]


def b_names(modules: list[LoraModule]) -> list[str]:
    return [m.b for m in modules]


def residual_names(modules: list[LoraModule]) -> list[str]:
    return [m.residual for m in modules if m.residual is not None]
