"""Models by config name: a built-in name, or ``module:Class`` for a user's FLModule.

The built-ins are import paths too, so a user's model resolves exactly as they do. Importing
this module does not import Lightning (seconds): a config naming a built-in model is
checked without it, and Lightning comes in when a model is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning_modules.base import FLModule

MODELS: dict[str, str] = {
    "fedavg_cnn": "lightning_modules.cnn:FedAvgCNN",
    "resnet18": "lightning_modules.resnet:ResNet18",
    "char_lstm": "lightning_modules.char_lstm:CharLSTM",
    "mlp": "lightning_modules.mlp:MLP",
}
MODEL_NAMES = tuple(MODELS)
ALLOWED = (
    f"allowed: {', '.join(MODEL_NAMES)}, or module:Class naming a subclass of "
    "lightning_modules.base.FLModule with block_names"
)


def is_builtin(name: str) -> bool:
    """Whether ``model.name`` is one of the built-in models (no import needed to know)."""
    return name in MODELS


def model_class(name: str) -> type[FLModule]:
    """The FLModule class for ``model.name`` (raises ConfigError naming the key)."""
    from fedsim.errors import ConfigError
    from fedsim.plugins import import_subclass, is_import_path
    from lightning_modules.base import FLModule

    if name not in MODELS and not is_import_path(name):
        raise ConfigError("model.name", name, ALLOWED)
    cls = import_subclass("model.name", MODELS.get(name, name), FLModule, ALLOWED)
    if not cls.block_names:
        raise ConfigError("model.name", name, f"{cls.__name__}.block_names is empty; {ALLOWED}")
    return cls


def build_model(name: str, **kwargs: Any) -> FLModule:
    """Build model ``name`` with the shape keywords its data implies (images: in_channels,
    num_classes, image_size; text: vocab_size, seq_len, num_classes), lr/momentum/wd and,
    if given, ``hidden`` (model.hidden). Raises ConfigError if the model takes none of those
    shape keywords (wrong kind of data), or ``hidden`` when it has no such argument."""
    import inspect

    from fedsim.errors import ConfigError

    cls = model_class(name)
    params = inspect.signature(cls.__init__).parameters
    if "hidden" in kwargs and "hidden" not in params:
        raise ConfigError(
            "model.hidden",
            list(kwargs["hidden"]),
            f"{name} takes no hidden layer sizes (only a model with a hidden argument, such "
            "as mlp, does); leave it null",
        )
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        missing = [k for k in kwargs if k not in params]
        if missing:
            raise ConfigError(
                "model.name",
                name,
                f"{cls.__name__} takes no {', '.join(missing)}, which data.name implies; "
                f"pick a model for that data ({ALLOWED})",
            )
    return cls(**kwargs)
