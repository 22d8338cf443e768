"""Where a LoRA adapter's matrices sit in the flat vector, for the personal-adapter methods.

peft names an adapted linear module's matrices ``<module>.lora_A.<adapter>.weight`` (A: r x in)
and ``<module>.lora_B.<adapter>.weight`` (B: out x r); the product B A (scaled by alpha / r)
is the module's update. ``lora_modules`` pairs them per module, with the module's residual
entry ``<module>.lora_residual`` (out x in) where the model has one
(``lightning_modules/lora_residual.py``); an algorithm that needs adapters refuses a model
without them in one line (``require_lora``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.errors import ConfigError
from lightning_modules.flat_params import ParamLayout
from lightning_modules.lora_residual import RESIDUAL


@dataclass(frozen=True)
class LoraModule:
    """One adapted linear module: its name and the entries of A, B (and its residual)."""

    module: str
    a: str  # A: (rank, in_features)
    b: str  # B: (out_features, rank)
    residual: str | None = None  # (out_features, in_features), if the model has one


def lora_modules(layout: ParamLayout) -> list[LoraModule]:
    """Every adapted module of ``layout``, in layout order (empty: no LoRA adapter)."""
    found = []
    for entry in layout.entries:
        module, sep, rest = entry.name.partition(".lora_A.")
        if not sep:
            continue
        b = f"{module}.lora_B.{rest}"
        residual = f"{module}.{RESIDUAL}"
        if b not in layout.by_name:
            raise ValueError(f"{entry.name} has no {b}: not a LoRA adapter peft made")
        found.append(LoraModule(module, entry.name, b,
                                residual if residual in layout.by_name else None))  # fmt: skip
    return found


def require_lora(layout: ParamLayout, algorithm: str) -> list[LoraModule]:
    """``lora_modules(layout)``; a ConfigError in one line if there are none."""
    modules = lora_modules(layout)
    if not modules:
        raise ConfigError(
            "algorithm.name", algorithm, "acts on the A and B matrices of a LoRA adapter, and "
            "the model has none (no lora_A / lora_B parameters): set model.name=causal_lm",
        )  # fmt: skip
    return modules


def refuse_residuals(modules: list[LoraModule], algorithm: str) -> None:
    """A ConfigError if the model has residuals (``model.args.residual``): FedEx-LoRA's fold,
    which other algorithms would only carry around (53 MB a client on SmolLM2)."""
    if any(m.residual is not None for m in modules):
        raise ConfigError(
            "model.args.residual", True, f"is FedEx-LoRA's fold, which algorithm.name="
            f"{algorithm} never uses: leave it false (or use algorithm.name=fedex_lora)",
        )  # fmt: skip


def a_names(modules: list[LoraModule]) -> list[str]:
    return [m.a for m in modules]


def b_names(modules: list[LoraModule]) -> list[str]:
    return [m.b for m in modules]


def residual_names(modules: list[LoraModule]) -> list[str]:
    return [m.residual for m in modules if m.residual is not None]
