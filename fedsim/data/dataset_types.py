"""The dataset abstraction: ``Dataset`` (inputs, labels, how a batch becomes tensors) and
its image implementation ``ImageDataset``; token sequences are in ``text.py``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import torch

from fedsim.data.names import NORMALIZATIONS
from fedsim.errors import ConfigError

# data.normalize=standard: each dataset's published per-channel mean and std of x / 255
PUBLISHED_MEAN_STD: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "mnist": ((0.1307,), (0.3081,)),
    "mnist-5k": ((0.1307,), (0.3081,)),
    "fashion-mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}


@dataclass(frozen=True)
class NaturalClient:
    """One client of a natural federation (a Shakespeare role): its samples, in order."""

    indices: np.ndarray  # int64 indices into the dataset, in the order the samples occur
    info: dict[str, Any]  # what it is, for partition.json (e.g. play and role)


class Dataset:
    """A whole dataset in memory: ``inputs`` (any dtype and shape), int64 ``labels`` (N,) and
    ``num_classes``; it turns an index batch into model-ready tensors and names the model
    keyword arguments its samples imply. ``ImageDataset`` and ``TextDataset`` implement it.

    ``natural_clients`` is None for a dataset that fedsim partitions (data.partition), else
    the clients the data comes with; ``split_gap`` is how many samples a client's in-order
    train/test split drops between its parts so no test input overlaps a train target.
    ``next_token``: its targets are next tokens (a language model's), so a run reports
    perplexity beside the per-token loss.
    """

    name: str
    labels: np.ndarray
    num_classes: int
    natural_clients: ClassVar[tuple[NaturalClient, ...] | None] = None
    split_gap: ClassVar[int] = 0
    next_token: ClassVar[bool] = False

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def inputs(self) -> np.ndarray:
        """The array the samples' inputs are read from (shared zero-copy with Ray workers)."""
        raise NotImplementedError

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples ``indices`` as model inputs and int64 labels (CPU tensors)."""
        raise NotImplementedError

    def model_kwargs(self) -> dict[str, int]:
        """The shape keywords a model for this data is built with (plus num_classes)."""
        raise NotImplementedError

    def subset(self, indices: np.ndarray) -> Dataset:
        """A dataset of samples ``indices`` only (in that order)."""
        raise NotImplementedError

    def concat(self, other: Dataset) -> Dataset:
        """This dataset with ``other``'s samples appended (same kind and sample shape).
        Raises ValueError if they do not fit."""
        raise NotImplementedError

    def normalized(self, mode: str) -> Dataset:
        """The same samples, their batches normalized as ``data.normalize`` says. Only image
        datasets have a choice: any other kind refuses all but the default (ConfigError)."""
        if mode != NORMALIZATIONS[0]:
            raise ConfigError(
                "data.normalize",
                mode,
                f"applies to image datasets only; {self.name} is not one: leave it "
                f"{NORMALIZATIONS[0]}",
            )
        return self


@dataclass(frozen=True)
class ImageDataset(Dataset):
    """A whole image dataset in memory: uint8 images (N, C, H, W) and int64 labels (N,).

    ``normalize`` (``data.normalize``) is how a batch's pixels x (0..255) become floats:
    ``pfllib`` (x / 127.5 - 1, i.e. PFLlib's Normalize(0.5, 0.5): in [-1, 1]), ``standard``
    ((x / 255 - mean) / std per channel, the dataset's published values) or ``none`` (x / 255).
    """

    name: str
    images: np.ndarray
    labels: np.ndarray
    num_classes: int
    normalize: str = NORMALIZATIONS[0]

    def __post_init__(self) -> None:
        if self.images.ndim != 4 or self.images.dtype != np.uint8:
            raise ValueError(
                f"images must be uint8 (N, C, H, W), got {self.images.dtype} {self.images.shape}"
            )
        if self.labels.shape != (self.images.shape[0],):
            raise ValueError(
                f"labels shape {self.labels.shape} does not match {self.images.shape[0]} images"
            )
        if self.normalize not in NORMALIZATIONS:
            raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {self.normalize}")

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def inputs(self) -> np.ndarray:
        return self.images

    @property
    def in_channels(self) -> int:
        """Number of colour channels: 1 gray, 3 colour."""
        return int(self.images.shape[1])

    @property
    def image_size(self) -> int:
        """Height (= width) of the square images."""
        return int(self.images.shape[2])

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Images as float32 (B, C, H, W) normalized as ``normalize`` says, and int64 labels."""
        indices = np.asarray(indices, dtype=np.int64)
        images = torch.from_numpy(self.images[indices]).to(torch.float32)
        if self.normalize == "pfllib":
            images.div_(127.5).sub_(1.0)
        else:
            images.div_(255.0)
            if self.normalize == "standard":
                mean, std = PUBLISHED_MEAN_STD[self.name]
                shape = (1, len(mean), 1, 1)
                images.sub_(torch.tensor(mean).view(shape)).div_(torch.tensor(std).view(shape))
        return images, torch.from_numpy(self.labels[indices])

    def normalized(self, mode: str) -> ImageDataset:
        """These images with batches normalized by ``mode`` (``data.normalize``); the arrays
        are shared, not copied. ``standard`` needs the dataset's published mean and std
        (ConfigError for a dataset without them)."""
        if mode not in NORMALIZATIONS:
            raise ConfigError("data.normalize", mode, f"allowed: {', '.join(NORMALIZATIONS)}")
        stats = PUBLISHED_MEAN_STD.get(self.name)
        if mode == "standard" and (stats is None or len(stats[0]) != self.in_channels):
            known = ", ".join(PUBLISHED_MEAN_STD)
            raise ConfigError(
                "data.normalize",
                mode,
                f"no published mean and std for {self.name} (known: {known}); use pfllib or none",
            )
        return self if mode == self.normalize else replace(self, normalize=mode)

    def model_kwargs(self) -> dict[str, int]:
        return {
            "in_channels": self.in_channels,
            "num_classes": self.num_classes,
            "image_size": self.image_size,
        }

    def subset(self, indices: np.ndarray) -> ImageDataset:
        indices = np.asarray(indices, dtype=np.int64)
        return replace(self, images=self.images[indices], labels=self.labels[indices])

    def concat(self, other: Dataset) -> ImageDataset:
        if not isinstance(other, ImageDataset) or other.images.shape[1:] != self.images.shape[1:]:
            shape = getattr(other, "images", other.inputs).shape[1:]
            raise ValueError(
                f"{other.name} images are {shape}, {self.name} images are "
                f"{self.images.shape[1:]}: they must have the same shape"
            )
        return replace(
            self,
            images=np.concatenate([self.images, other.images]),
            labels=np.concatenate([self.labels, other.labels]),
        )


@dataclass(frozen=True)
class TabularDataset(Dataset):
    """Rows of numeric features in memory: float32 ``features`` (N, F), int64 labels (N,).

    Models are built as for a 1x1 image of F channels (in_channels=F, image_size=1), which is
    what the built-in ``mlp`` reads: F inputs.
    """

    name: str
    features: np.ndarray
    labels: np.ndarray
    num_classes: int

    def __post_init__(self) -> None:
        if self.features.ndim != 2 or self.features.dtype != np.float32:
            raise ValueError(
                f"features must be float32 (N, F), got {self.features.dtype} {self.features.shape}"
            )
        if self.labels.shape != (self.features.shape[0],):
            raise ValueError(
                f"labels shape {self.labels.shape} does not match {self.features.shape[0]} rows"
            )

    @property
    def inputs(self) -> np.ndarray:
        return self.features

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Features as float32 (B, F) and int64 labels."""
        indices = np.asarray(indices, dtype=np.int64)
        return torch.from_numpy(self.features[indices]), torch.from_numpy(self.labels[indices])

    def model_kwargs(self) -> dict[str, int]:
        return {
            "in_channels": int(self.features.shape[1]),
            "num_classes": self.num_classes,
            "image_size": 1,
        }

    def subset(self, indices: np.ndarray) -> TabularDataset:
        indices = np.asarray(indices, dtype=np.int64)
        return replace(self, features=self.features[indices], labels=self.labels[indices])

    def concat(self, other: Dataset) -> TabularDataset:
        if (
            not isinstance(other, TabularDataset)
            or other.features.shape[1:] != (self.features.shape[1:])
        ):
            raise ValueError(f"{other.name} rows do not have {self.name}'s features")
        return replace(
            self,
            features=np.concatenate([self.features, other.features]),
            labels=np.concatenate([self.labels, other.labels]),
        )
