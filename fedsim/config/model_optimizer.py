"""One rule for the optimizer: a model either takes ``client.*`` or owns its optimizer.

The built-in models (and any ``FLModule`` that keeps its ``configure_optimizers``) are
trained with ``client.optimizer`` at ``client.lr`` (null: SGD at 0.005). A LightningModule
that defines its own ``configure_optimizers`` owns its optimizer and learning rate:
its constructor arguments come from ``model.args``, and a ``client.*`` optimizer key, which
it would ignore, is refused in one line that says what to set instead. Resolved when the
config is read, so ``config.yaml`` records what a run uses (null where the module decides).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fedsim.config.client import ClientConfig
from fedsim.errors import ConfigError

BUILT_IN_LR = 0.005
BUILT_IN_OPTIMIZER = "sgd"


def _default(name: str) -> Any:
    spec = {f.name: f for f in dataclasses.fields(ClientConfig)}[name]
    return spec.default_factory() if spec.default is dataclasses.MISSING else spec.default


# client keys a module with its own configure_optimizers decides itself, and their defaults
# (ClientConfig's: the one home of the optimizer defaults)
OWNED = {
    key: _default(key)
    for key in ("lr", "optimizer", "momentum", "nesterov", "betas", "weight_decay", "warmup_steps")
}


def model_owns_optimizer(model_name: str) -> bool:
    """Whether ``model.name`` defines its own ``configure_optimizers`` (a built-in never
    does: known without importing Lightning)."""
    from lightning_modules.registry import is_builtin, model_class, owns_optimizers

    return not is_builtin(model_name) and owns_optimizers(model_class(model_name))


def _instead(key: str) -> str:
    if key == "warmup_steps":
        return "warm its lr up with an lr_scheduler in its configure_optimizers"
    if key in ("lr", "momentum", "weight_decay"):
        return (
            f"set {key} in its configure_optimizers, or pass it to its constructor with "
            f"model.args.{key}"
        )
    return "choose the optimizer in its configure_optimizers"


def resolve_optimizer_keys(cfg: Any) -> None:
    """Fill ``client.lr`` / ``client.optimizer`` for a model that takes them; ConfigError for
    a ``client.*`` optimizer key set for a module that owns its optimizer."""
    c = cfg.client
    if not model_owns_optimizer(cfg.model.name):
        c.lr = BUILT_IN_LR if c.lr is None else c.lr
        c.optimizer = BUILT_IN_OPTIMIZER if c.optimizer is None else c.optimizer
        return
    model = cfg.model.name.rsplit(":", 1)[-1]
    for key, default in OWNED.items():
        value = getattr(c, key)
        if value != default:
            raise ConfigError(
                f"client.{key}", value,
                f"{model} defines its own configure_optimizers, which fedsim uses as it is: "
                f"remove client.{key} (or set it to {_shown(default)}) and {_instead(key)}",
            )  # fmt: skip


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value).replace(" ", "")
