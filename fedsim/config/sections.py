"""The plain sections of an experiment config: data, model, client, runtime, tracking.

Each range is declared on its field with ``checked`` (fedsim/checks.py), as ``fedsim keys``
shows; a field's line comment is its description there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fedsim.checks import checked, patterns_or_none
from fedsim.data.names import NORMALIZATIONS, dataset_loader


def is_run_name(value: str) -> bool:
    """A run name is one folder under runs/: no separators, no leading dot, printable."""
    return (
        bool(value)
        and value.isprintable()
        and not value.startswith(".")
        and not any(sep in value for sep in ("/", "\\", "\0"))
        and len(value.encode("utf-8", "surrogateescape")) <= 200
    )


def _model_resolves(name: str) -> bool:
    """A built-in ``model.name``, or a module:Class imported now; ConfigError if it cannot be.
    (Built-ins are built, and Lightning imported, later: the config check stays fast.)"""
    from lightning_modules.registry import is_builtin, model_class

    return is_builtin(name) or model_class(name) is not None


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


@dataclass
class ModelConfig:
    name: str = checked(  # the network: a built-in (fedsim keys lists them) or module:Class
        "fedavg_cnn", _model_resolves, "a built-in name or module:Class"
    )
    hidden: list[int] | None = checked(  # hidden layer sizes (mlp: [200, 200]); null: the model's
        None,
        lambda v: (
            v is None
            or (
                isinstance(v, list)
                and len(v) > 0
                and all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in v)
            )
        ),
        "a non-empty list of integers >= 1 (or null: the model's default)",
    )
    # keyword arguments of the model's constructor (LightningCLI's init_args), e.g. a plain
    # LightningModule's own lr: {lr: 0.001}; recorded in config.yaml, searchable by fedsim tune
    args: dict = checked(
        predicate=lambda v: isinstance(v, dict) and all(
            isinstance(k, str) and k.isidentifier() for k in v
        ),
        allowed="a mapping of constructor argument names to values, e.g. {lr: 0.001}",
        factory=dict,
    )  # fmt: skip


OPTIMIZERS = ("sgd", "adam", "adamw")
PRECISIONS = ("32", "bf16-mixed")


def _betas_ok(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in value)
        and all(0 <= b < 1 for b in value)
    )


def _epochs_ok(value: Any) -> bool:
    return value is None or (
        isinstance(value, list)
        and len(value) >= 1
        and all(isinstance(e, int) and not isinstance(e, bool) and e >= 1 for e in value)
    )


@dataclass
class ClientConfig:
    epochs: int = checked(1, lambda v: v >= 1, "must be >= 1")  # local epochs per round
    # unequal local work: client k does epochs_by_client[k % len] epochs (FedNova's setting);
    # null: every client does client.epochs
    epochs_by_client: list | None = checked(
        None, _epochs_ok, "must be a non-empty list of integers >= 1 (or null)"
    )
    # local optimizer steps a round instead of epochs (FlowerTune's unit for language models;
    # each over client.grad_accumulation batches, the data reshuffled at each pass); null: epochs
    steps: int | None = checked(
        None, lambda v: v is None or v >= 1, "must be an integer >= 1 (or null: client.epochs)"
    )
    grad_accumulation: int = checked(  # batches whose gradients make one optimizer step
        1, lambda v: v >= 1, "must be an integer >= 1"
    )
    warmup_steps: int = checked(  # lr warm-up within a client's training: step i x min(1, (i+1)/w)
        0, lambda v: v >= 0, "must be an integer >= 0 (0: none)"
    )
    # the client learning rate; null: 0.005 for a model that takes client.* (the built-ins),
    # and for a module with its own configure_optimizers, its own (set it with model.args)
    lr: float | None = checked(
        None,
        lambda v: v is None or v > 0,
        "must be > 0 (or null: the model's default)",
        schedulable=True,
    )
    # sgd | adam | adamw; null: sgd for the built-ins, a module's own configure_optimizers
    optimizer: str | None = checked(
        None, lambda v: v is None or v in OPTIMIZERS, f"allowed: {', '.join(OPTIMIZERS)}"
    )
    batch_size: int = checked(10, lambda v: v >= 1, "must be >= 1")  # training batch size
    momentum: float = checked(  # SGD momentum
        0.0, lambda v: 0 <= v < 1, "must be in [0, 1)", schedulable=True
    )
    nesterov: bool = False  # SGD: Nesterov momentum (needs momentum > 0)
    betas: list = checked(  # adam / adamw: (beta1, beta2)
        predicate=_betas_ok, allowed="must be two numbers in [0, 1)", factory=lambda: [0.9, 0.999]
    )
    weight_decay: float = checked(  # L2 (adamw: decoupled)
        0.0, lambda v: v >= 0, "must be >= 0", schedulable=True
    )
    # Lightning's spelling: 32 | bf16-mixed (autocast to bfloat16 on CUDA; not on a CPU)
    precision: Any = checked("32", lambda v: str(v) in PRECISIONS, "allowed: 32, bf16-mixed")
    eval_batch_size: int = checked(500, lambda v: v >= 1, "must be >= 1")  # evaluation batch
    clip_grad_norm: float | None = checked(  # clip each step's gradient to this L2 norm
        None, lambda v: v is None or v > 0, "must be > 0 (or null: no clipping)", schedulable=True
    )

    def __post_init__(self) -> None:
        self.precision = str(self.precision)  # YAML reads 32 as a number


@dataclass
class RuntimeConfig:
    # auto (local unless Ray can win back its start-up: fedsim/runtime/executor_choice.py) |
    # ray (a pool of worker actors) | local (in this process); the numbers are the same
    executor: str = checked(
        "auto", lambda v: v in ("auto", "local", "ray"), "allowed: auto, local, ray"
    )
    device: str = checked(  # auto (CUDA where a GPU is visible) | cpu | cuda | cuda:N
        "auto",
        lambda v: v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()),
        "allowed: auto, cpu, cuda, cuda:N",
    )
    # Ray pool size; None: fill the machine (one per CPU, or workers_per_gpu per GPU). Only
    # with executor=ray or auto (which it makes Ray): the local executor runs one worker in
    # this process (set: an error).
    workers: int | None = checked(
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null: fill the machine)"
    )
    cpus_per_worker: float = checked(  # CPUs Ray reserves for each worker actor
        1.0, lambda v: v > 0, "must be > 0"
    )
    gpus_per_worker: float | None = checked(  # None: 1/workers_per_gpu on a GPU cluster, else 0
        None,
        lambda v: v is None or v >= 0,
        "must be >= 0 (fractions allowed; null: by runtime.workers_per_gpu)",
    )
    workers_per_gpu: int = checked(  # how many workers share one GPU when gpus_per_worker is None
        1, lambda v: v >= 1, "must be >= 1"
    )
    address: str | None = None  # "auto" or a cluster address; None: RAY_ADDRESS or a local Ray
    connect_timeout_s: float = checked(  # seconds for the Ray at runtime.address to answer
        15.0, lambda v: v > 0, "must be > 0"
    )
    state_memory_gb: float | None = checked(  # client states in memory beyond it spill to disk
        None,
        lambda v: v is None or v >= 0,
        "must be >= 0 (null: a quarter of the machine's memory)",
    )


@dataclass
class AlgorithmConfig:
    name: str = "fedavg"  # a built-in algorithm (fedsim keys lists them) or module:Class
    params: Any = None  # the algorithm's Params dataclass, filled by ``load_config``


def _wandb_params(value: Any) -> bool:
    """``tracking.wandb.params``: names (no dots: W&B shows nested config with dots) to
    plain values, so each is one column of W&B's runs table and parallel coordinates."""
    plain = (str, int, float, bool, type(None))
    return isinstance(value, dict) and all(
        isinstance(k, str) and k and "." not in k and isinstance(v, plain) for k, v in value.items()
    )


@dataclass
class WandbConfig:
    """``tracking.wandb``: Weights & Biases logging (fedsim/tracking/wandb_sink.py)."""

    enabled: bool = False  # mirror the run to Weights & Biases
    project: str = checked(  # the W&B project
        "fedsim", lambda v: bool(v.strip()), "must be a non-empty string"
    )
    entity: str | None = None  # the W&B team or user; null: your default entity
    group: str | None = None  # runs of one sweep or comparison side by side
    tags: list[str] = checked(  # W&B run tags
        predicate=lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v),
        allowed="must be a list of strings",
        factory=list,
    )
    mode: str = checked(  # online | offline | disabled; online falls back to offline
        "online",
        lambda v: v in ("online", "offline", "disabled"),
        "allowed: online, offline, disabled",
    )
    max_client_series: int = checked(  # clients 0..N-1 drawn in the per-client charts
        20, lambda v: v >= 0, "must be >= 0"
    )
    params: dict[str, Any] = checked(  # top-level W&B config keys: a search's sampled values
        predicate=_wandb_params,
        allowed="must map names without '.' to a string, number, true/false or null",
        factory=dict,
    )


@dataclass
class TrackingConfig:
    """``tracking``: where a run is mirrored besides its run folder."""

    wandb: WandbConfig = field(default_factory=WandbConfig)
