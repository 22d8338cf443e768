"""The ``data`` section and its ``data.partition``: which dataset, and how it is split among
clients and into each client's train and test splits (``fedsim/data/`` reads it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fedsim.checks import checked, patterns_or_none
from fedsim.data.names import NORMALIZATIONS, dataset_loader


def _dataset_resolves(name: str) -> bool:
    """Check ``data.name`` now (built-in or module:function); ConfigError if it cannot be."""
    dataset_loader(name)
    return True


_PARTITIONS = ("iid", "dirichlet", "pathological", "relabel", "rotation", "clustered", "natural")


def _columns_ok(value: Any) -> bool:
    """One column name, or a non-empty list of names (numeric columns: tabular)."""
    names = [value] if isinstance(value, str) else value
    return (
        isinstance(names, list) and len(names) > 0 and all(isinstance(n, str) and n for n in names)
    )


@dataclass
class PartitionConfig:
    name: str = checked(  # iid|dirichlet|pathological|relabel|rotation|clustered|natural (hf:)
        "dirichlet",
        lambda v: v in _PARTITIONS or (v.startswith("flwr:") and len(v) > 5),
        "allowed: " + ", ".join(_PARTITIONS) + ", or flwr:<a flwr-datasets partitioner>",
    )
    alpha: float = checked(  # Dirichlet concentration (dirichlet; clustered: per cluster)
        0.1, lambda v: v > 0, "must be > 0"
    )
    classes_per_client: int = checked(2, lambda v: v >= 1, "must be >= 1")  # k (pathological)
    # Clusters C of relabel / rotation / clustered (client k in cluster k % C); null: 4 (or
    # the number of clients if fewer) for relabel and clustered, continuous angles for rotation
    clusters: int | None = checked(
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null: the setting's default)"
    )
    step: float = checked(  # rotation without clusters: client k turned k * step degrees
        4.0, math.isfinite, "must be a finite number (degrees)"
    )
    base: str = checked(  # the split relabel / rotation start from: iid | dirichlet | pathological
        "iid",
        lambda v: v in ("iid", "dirichlet", "pathological"),
        "allowed: iid, dirichlet, pathological",
    )
    sigma: float = checked(  # clustered: clients' spread around their cluster's class mix
        1.0, lambda v: v > 0, "must be > 0"
    )
    by: str | None = checked(  # natural (hf: data): one client per value of this column
        None, lambda v: v is None or len(v) > 0, "a column name (or null)"
    )
    # natural: only the clients whose data.partition.by value matches one of these shell
    # patterns (debian-reference's English clients: [en-*]); null: every value
    values: list | None = checked(
        None, patterns_or_none, "a non-empty list of patterns such as en-* (or null: every value)"
    )
    args: dict = checked(  # flwr:<Partitioner>: its arguments, e.g. {alpha: 0.5, seed: 42}
        predicate=lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
        allowed="a mapping of the partitioner's argument names to values",
        factory=dict,
    )


@dataclass
class DataConfig:
    name: str = checked(  # mnist(-5k), fashion-mnist, cifar10/100, shakespeare, hf:<local path>
        "mnist-5k", _dataset_resolves, "a built-in name, hf:<local path> or module:function"
    )
    root: str = "data"  # folder the datasets are read from (and downloaded to)
    num_clients: int = checked(20, lambda v: v >= 1, "must be >= 1")  # clients to split into
    train_ratio: float = checked(  # each client's share for training; the rest is its test
        0.75, lambda v: 0 < v < 1, "must be in (0, 1)"
    )
    download: bool = True  # download a built-in dataset missing under data.root
    normalize: str = checked(  # pixels: pfllib (x-0.5)/0.5 | standard (published mean, std) | none
        "pfllib", lambda v: v in NORMALIZATIONS, "allowed: " + ", ".join(NORMALIZATIONS)
    )
    max_samples: int | None = checked(  # a stratified subset before partitioning; null: all
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null: all samples)"
    )
    min_samples: int = checked(  # shakespeare, natural: clients with fewer samples are left out
        64, lambda v: v >= 2, "must be >= 2 (a client needs a train and a test sample)"
    )
    max_client_samples: int | None = checked(  # shakespeare: a role's first N samples; null: all
        None, lambda v: v is None or v >= 2, "must be >= 2 (or null: all of a client's samples)"
    )
    plays: int | None = checked(  # shakespeare: the roles come from this many plays, dealt in turn
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null: the largest roles of any play)"
    )
    split: str = checked(  # hf: the split to read (a save_to_disk folder may hold several)
        "train", lambda v: len(v) > 0, "a split name, e.g. train"
    )
    input_column: Any = checked(  # hf: image column, numeric column(s) (tabular) or text windows
        "image", _columns_ok, "a column name, or a list of numeric column names"
    )
    label_column: str = checked(  # hf: the class column (integers >= 0, true/false or strings)
        "label", lambda v: len(v) > 0, "a column name"
    )
    resize: int | None = checked(  # hf: images resized to this square side; null: as stored
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null: keep the images' size)"
    )
    test_split: str | None = checked(  # hf natural: each client's test rows come from this split
        None, lambda v: v is None or len(v) > 0, "a split name (or null: data.train_ratio)"
    )
    tokenizer: str | None = checked(  # shakespeare-lm, hf: text: smollm2, folder, .gguf, Hub id
        None, lambda v: v is None or len(v) > 0, "a model source (or null: model.args.source)"
    )
    max_length: int | None = checked(  # shakespeare-lm, hf: text: tokens per sample; null: 128
        None, lambda v: v is None or v >= 2, "must be >= 2 (or null: 128)"
    )
    packing: bool | None = None  # shakespeare-lm, hf: text: windows of a stream (null) | a row each
    permute_labels: bool = False  # classes: each client its own label ids (a seeded permutation)
    prompt_column: str | None = None  # hf: instruction data's prompts (no loss on them)
    response_column: str | None = None  # hf: instruction data's responses (the loss is on them)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
