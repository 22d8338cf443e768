"""Models by config name."""

from __future__ import annotations

from lightning_modules.base import FLModule
from lightning_modules.cnn import FedAvgCNN
from lightning_modules.resnet import ResNet18

MODELS: dict[str, type[FLModule]] = {"fedavg_cnn": FedAvgCNN, "resnet18": ResNet18}
MODEL_NAMES = tuple(MODELS)


def build_model(
    name: str, *, in_channels: int, num_classes: int, image_size: int, **optim: float
) -> FLModule:
    """Build model ``name`` for images of the given shape; ``optim`` holds lr/momentum/wd."""
    return MODELS[name](
        in_channels=in_channels, num_classes=num_classes, image_size=image_size, **optim
    )
