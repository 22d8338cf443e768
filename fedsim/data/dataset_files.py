"""Where a built-in image dataset's files are (torchvision's layout under ``data.root``;
Debian's Fashion-MNIST package), whether they are there, and the one-line error when they are
not and may not be downloaded. Torch-free: ``fedsim run`` asks before it imports torch, so a
missing dataset is one line in about a second rather than after torch and the model load."""

from __future__ import annotations

from pathlib import Path

from fedsim.errors import ConfigError

# Debian's package `dataset-fashion-mnist` installs the four .gz idx files here.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

IDX_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
IDX_NAMES = ("mnist", "fashion-mnist")
CIFAR_NAMES = ("cifar10", "cifar100")
CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR100_DIR = "cifar-100-python"


def idx_dir(name: str, root: Path) -> Path:
    return root / ("MNIST" if name == "mnist" else "FashionMNIST") / "raw"


def find_idx_files(folder: Path) -> dict[str, Path] | None:
    """The four idx files in `folder` (plain preferred, else .gz), or None if any is missing."""
    found = {}
    for key, stem in IDX_FILES.items():
        for candidate in (folder / stem, folder / f"{stem}.gz"):
            if candidate.is_file():
                found[key] = candidate
                break
        else:
            return None
    return found


def present_idx_files(name: str, root: Path) -> dict[str, Path] | None:
    """MNIST's or Fashion-MNIST's idx files under ``root`` (or Debian's copy), if all there."""
    folders = [idx_dir(name, root)] + ([DEBIAN_FASHION_MNIST] if name == "fashion-mnist" else [])
    return next((f for f in map(find_idx_files, folders) if f is not None), None)


def cifar_files(name: str, root: Path) -> tuple[list[Path], Path, str]:
    """(train files, test file, label key) in torchvision's layout."""
    if name == "cifar10":
        folder = root / CIFAR10_DIR
        return [folder / f for f in CIFAR10_TRAIN], folder / "test_batch", "labels"
    folder = root / CIFAR100_DIR
    return [folder / "train"], folder / "test", "fine_labels"


def expected_files(name: str, root: Path) -> str:
    """The files ``name`` needs under ``root``, as an error message shows them."""
    if name in IDX_NAMES:
        expected = f"{idx_dir(name, root)}/{{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte[.gz]"
        if name == "fashion-mnist":
            expected += f" or the same .gz files in {DEBIAN_FASHION_MNIST}"
        return expected
    if name == "cifar10":
        return f"{root / CIFAR10_DIR}/{{data_batch_1..5,test_batch}}"
    return f"{root / CIFAR100_DIR}/{{train,test}}"


def dataset_present(name: str, root: str | Path) -> bool:
    """Whether a built-in dataset can be loaded without a download (other names: True)."""
    root = Path(root).expanduser()
    if name in IDX_NAMES:
        return present_idx_files(name, root) is not None
    if name in CIFAR_NAMES:
        train_files, test_file, _ = cifar_files(name, root)
        return all(p.is_file() for p in [*train_files, test_file])
    return True


def not_downloaded(name: str, root: Path) -> ConfigError:
    """The error for a dataset whose files are missing while download is off."""
    return ConfigError(
        "data.name",
        name,
        f"dataset files not found under data.root={root} (expected "
        f"{expected_files(name, root)}) and download is disabled; put the files there or "
        "enable data.download",
    )


def check_files_without_download(name: str, root: str | Path, download: bool) -> None:
    """A built-in dataset that may not download must be on disk: the error its loader would
    give, from the file names alone."""
    if not download and not dataset_present(name, root):
        raise not_downloaded(name, Path(root).expanduser())
