"""What fedsim needs of a run's LightningModule, checked when the run is built (one line each).

A plain ``LightningModule`` trains as Lightning users write it: its own
``configure_optimizers`` (any form Lightning accepts, ``lightning_steps.py``), a
``training_step(batch, batch_idx)`` on ``(x, y)`` batches, ``forward(x)`` giving logits, its
blocks derived from its top-level children. What fedsim cannot honour for such a module is
refused here, naming the key and why: client optimizer keys its own ``configure_optimizers``
overrides, an algorithm's client terms it has no ``terms`` keyword for, bf16 on a CPU.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fedsim.config import ExperimentConfig
from fedsim.errors import ConfigError
from fedsim.runtime.lightning_steps import resolve_optimizers, takes_terms
from lightning_modules.base import FLModule
from lightning_modules.blocks import block_names

OPTIMIZER_KEYS = ("optimizer", "momentum", "nesterov", "betas", "weight_decay")


def own_optimizers(module: Any) -> bool:
    """Whether the module's class defines ``configure_optimizers`` itself (not FLModule's)."""
    return type(module).configure_optimizers is not FLModule.configure_optimizers


def check_model(cfg: ExperimentConfig, module: Any, algorithm: Any, device: str) -> None:
    """ConfigError for what this run asks of ``module`` that it cannot give (see module doc)."""
    name = type(module).__name__
    if own_optimizers(module):
        defaults = {f.name: f.default for f in dataclasses.fields(cfg.client)}
        defaults["betas"] = [0.9, 0.999]
        for key in OPTIMIZER_KEYS:
            if getattr(cfg.client, key) != defaults[key]:
                raise ConfigError(
                    f"client.{key}", getattr(cfg.client, key),
                    f"{name} defines its own configure_optimizers, which wins; set the "
                    "optimizer there, or remove this key",
                )  # fmt: skip
    resolve_optimizers(module)  # its return value is one Lightning accepts, one optimizer
    if algorithm.uses_client_terms() and not takes_terms(type(module), "training_step"):
        raise ConfigError(
            "model.name", cfg.model.name,
            f"algorithm.name={cfg.algorithm.name} adds client terms to every training step, and "
            f"{name}.training_step takes no terms= keyword: subclass "
            "lightning_modules.base.FLModule, or accept terms=None and add terms.loss(params)",
        )  # fmt: skip
    if not block_names(module):
        raise ConfigError("model.name", cfg.model.name, f"{name} has no block with parameters")
    if cfg.client.precision == "bf16-mixed" and not str(device).startswith("cuda"):
        raise ConfigError(
            "client.precision", "bf16-mixed",
            "autocasts on CUDA only; on a CPU bfloat16 is slower than float32 here: use 32",
        )  # fmt: skip
