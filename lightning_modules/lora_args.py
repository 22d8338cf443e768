"""The LoRA keys of ``model.args`` (rank, alpha, dropout, targets, layers, dtype), checked
without torch.

One set of rules for the two places that read them: the config check (``fedsim run --check``
answers a wrong rank in about a second, before any data or model is loaded) and the adapted
models' constructors (``adapters.check_lora``), which apply them to the values they resolve.
"""

from __future__ import annotations

from typing import Any

from fedsim.errors import ConfigError
from fedsim.pretrained import DTYPES

LORA_KEYS = ("rank", "alpha", "dropout", "targets", "layers", "dtype")
# model.args keys that once asked a model for an algorithm's variant: the algorithm declares it
RETIRED_ARGS = {"residual": "fedex_lora", "personal_adapter": "feddpa"}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_lora_key(name: str, value: Any) -> None:
    """``model.args.<name>``'s value is allowed (a ConfigError naming it otherwise)."""
    key = f"model.args.{name}"
    if name == "rank" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(key, value, "the LoRA rank must be an integer >= 1")
    if name == "alpha" and not (_number(value) and value > 0):
        raise ConfigError(key, value, "LoRA's alpha must be a number > 0")
    if name == "dropout" and not (_number(value) and 0 <= value < 1):
        raise ConfigError(key, value, "must be in [0, 1)")
    if name == "targets":
        targets = [value] if isinstance(value, str) else value
        if not isinstance(targets, (list, tuple)) or not targets or not all(
            isinstance(t, str) and t for t in targets
        ):
            raise ConfigError(key, value, "a list of module names, e.g. [q_proj, v_proj]")
    if name == "layers" and value is not None and (
        not isinstance(value, (list, tuple)) or not value
        or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
    ):  # fmt: skip
        raise ConfigError(key, value, "null (every layer) or a list of layer indices "
                          ">= 0, e.g. [26, 27, 28, 29]: LoRA on those layers only")  # fmt: skip
    if name == "dtype" and value not in DTYPES:
        raise ConfigError(key, value, f"allowed: {', '.join(DTYPES)}")


def refuse_retired(key: str, value: Any) -> None:
    """A ConfigError for a ``model.args`` key an algorithm's adapter declaration replaced."""
    if key in RETIRED_ARGS:
        raise ConfigError(
            f"model.args.{key}", value, f"is gone: algorithm.name={RETIRED_ARGS[key]} declares "
            "the adapter variant it needs and fedsim builds it; remove the key",
        )  # fmt: skip


def check_lora_args(args: dict[str, Any]) -> None:
    """Each LoRA key ``args`` gives is allowed; keys left out take the model's defaults, and
    the retired variant keys are refused."""
    for key, value in args.items():
        refuse_retired(key, value)
    for name in LORA_KEYS:
        if name in args:
            check_lora_key(name, args[name])
