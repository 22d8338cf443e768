"""Models by config name: a built-in name, or ``module:Class`` for a user's FLModule.

The built-ins are import paths too, so a user's model resolves exactly as they do.
"""

from __future__ import annotations

from lightning_modules.base import FLModule

MODELS: dict[str, str] = {
    "fedavg_cnn": "lightning_modules.cnn:FedAvgCNN",
    "resnet18": "lightning_modules.resnet:ResNet18",
}
MODEL_NAMES = tuple(MODELS)
ALLOWED = (
    f"allowed: {', '.join(MODEL_NAMES)}, or module:Class naming a subclass of "
    "lightning_modules.base.FLModule with block_names"
)


def model_class(name: str) -> type[FLModule]:
    """The FLModule class for ``model.name`` (raises ConfigError naming the key)."""
    from fedsim.errors import ConfigError
    from fedsim.plugins import import_subclass, is_import_path

    if name not in MODELS and not is_import_path(name):
        raise ConfigError("model.name", name, ALLOWED)
    cls = import_subclass("model.name", MODELS.get(name, name), FLModule, ALLOWED)
    if not cls.block_names:
        raise ConfigError("model.name", name, f"{cls.__name__}.block_names is empty; {ALLOWED}")
    return cls


def build_model(
    name: str, *, in_channels: int, num_classes: int, image_size: int, **optim: float
) -> FLModule:
    """Build model ``name`` for images of the given shape; ``optim`` holds lr/momentum/wd."""
    return model_class(name)(
        in_channels=in_channels, num_classes=num_classes, image_size=image_size, **optim
    )
