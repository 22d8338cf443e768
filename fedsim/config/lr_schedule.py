"""The old spelling of a per-round client lr: ``client.lr_schedule`` + ``client.lr_decay``.

One language says how a value changes over rounds: a schedule (``fedsim/schedules.py``). The
old keys still read, translated in the raw config into a schedule on ``client.lr`` with the
same formula (exponential: ``lr * decay ** r``; cosine: to 0 over the run's rounds), and a
one-line deprecation note; ``config.yaml`` then records the new form.
"""

from __future__ import annotations

from typing import Any

from fedsim.config.model_optimizer import BUILT_IN_LR, model_owns_optimizer
from fedsim.config.sections import ModelConfig
from fedsim.errors import ConfigError
from fedsim.schedules import is_schedule

OLD_KINDS = ("constant", "exponential", "cosine")
OLD_KEYS = ("client.lr_schedule", "client.lr_decay")  # read, with a deprecation note


def translate_lr_schedule(raw: dict[str, Any]) -> list[str]:
    """Replace ``client.lr_schedule`` / ``client.lr_decay`` of a raw config dict by a schedule
    on ``client.lr``, in place; the notes to print (ConfigError naming the old key)."""
    client = raw.get("client")
    if not isinstance(client, dict) or not {"lr_schedule", "lr_decay"} & set(client):
        return []
    client = raw["client"] = dict(client)
    kind = client.pop("lr_schedule", "constant")
    decay = client.pop("lr_decay", 1.0)
    if kind not in OLD_KINDS:
        raise ConfigError("client.lr_schedule", kind, f"allowed: {', '.join(OLD_KINDS)}")
    if isinstance(decay, str):
        try:
            decay = float(decay)  # YAML 1.1 reads 9e-1 as text
        except ValueError:
            pass
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay <= 1:
        raise ConfigError("client.lr_decay", decay, "must be in (0, 1]")
    if decay != 1.0 and kind != "exponential":
        raise ConfigError(
            "client.lr_decay", decay, "acts only with client.lr_schedule=exponential"
        )
    if kind == "constant":
        return []  # an old config.yaml spelling out the default
    lr = client.get("lr")
    if is_schedule(lr):
        raise ConfigError(
            "client.lr_schedule", kind,
            "client.lr is given as a schedule already: leave client.lr_schedule out",
        )  # fmt: skip
    model = raw.get("model") if isinstance(raw.get("model"), dict) else {}
    name = model.get("name", ModelConfig.name)
    if lr is None and isinstance(name, str) and model_owns_optimizer(name):
        raise ConfigError(
            "client.lr_schedule", kind,
            f"is a schedule on client.lr now, and {name.rsplit(':', 1)[-1]} defines its own "
            "configure_optimizers, which decides its lr: schedule it there (an lr_scheduler)",
        )  # fmt: skip
    initial = BUILT_IN_LR if lr is None else lr
    new: dict[str, Any] = {"schedule": kind, "initial": initial}
    if kind == "exponential":
        new["decay"] = decay
    client["lr"] = new
    shown = ", ".join(f"{k}: {v}" for k, v in new.items())
    old = f"client.lr_schedule={kind}"
    if kind == "exponential":
        old += f" client.lr_decay={decay}"
    return [f"{old} is deprecated: read as client.lr={{{shown}}}"]
