"""Keys that act only together with another key: set alone, they would be silently ignored.

A key of ``DEPENDENT`` whose value differs from its default while the key it depends on does
not enable it is a one-line ConfigError naming both (``aggregation.trim=0.2`` with
``aggregation.rule=mean``). A default value is never refused, so a config may spell out
every key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from fedsim.data.names import HF_PREFIX, LM_DATASET_NAMES, TOKENIZED_MODELS
from fedsim.errors import ConfigError, show_value

_ROBUST = ("krum", "multikrum", "bulyan")
_CORRUPTING = ("sign_flip", "scale", "gaussian")
_CLUSTERED = ("relabel", "rotation", "clustered")

# (key, the key it depends on, when that enables it, what the message says is needed)
Rule = tuple[str, str, Callable[[Any], bool], str]
DEPENDENT: list[Rule] = [
    ("aggregation.trim", "aggregation.rule", lambda v: v == "trimmed_mean", "trimmed_mean"),
    ("aggregation.krum_f", "aggregation.rule", lambda v: v in _ROBUST, "|".join(_ROBUST)),
    ("aggregation.krum_m", "aggregation.rule", lambda v: v == "multikrum", "multikrum"),
    ("attack.fraction", "attack.kind", lambda v: v != "none", "an attack"),
    ("attack.start_round", "attack.kind", lambda v: v != "none", "an attack"),
    ("attack.factor", "attack.kind", lambda v: v in _CORRUPTING, "|".join(_CORRUPTING)),
    (
        "privacy.noise_multiplier",
        "privacy.mode",
        lambda v: v in ("local", "central"),
        "local|central",
    ),
    ("privacy.sigma", "privacy.mode", lambda v: v == "fixed_sigma", "fixed_sigma"),
    ("privacy.delta", "privacy.mode", lambda v: v != "none", "a privacy mode"),
    ("privacy.target_quantile", "privacy.adaptive", lambda v: v is True, "true"),
    ("compression.threshold", "compression.kind", lambda v: v == "threshold", "threshold"),
    ("compression.fraction", "compression.kind", lambda v: v == "topk", "topk"),
    ("compression.error_feedback", "compression.kind", lambda v: v != "none", "a compression"),
    *[
        (f"asynchronous.{key}", "asynchronous.enabled", lambda v: v is True, "true")
        for key in (
            "buffer_size",
            "concurrency",
            "max_staleness",
            "stale",
            "staleness_discount",
            "staleness_exponent",
        )
    ],  # fmt: skip
    (
        "asynchronous.staleness_exponent",
        "asynchronous.staleness_discount",
        lambda v: v == "polynomial",
        "polynomial",
    ),
    (
        "data.partition.classes_per_client",
        "data.partition",
        lambda p: "pathological" in (p.name, p.base if p.name in ("relabel", "rotation") else None),
        "pathological (or relabel/rotation with data.partition.base=pathological)",
    ),  # fmt: skip
    (
        "data.partition.alpha",
        "data.partition",
        lambda p: (
            "dirichlet" in (p.name, p.base if p.name in ("relabel", "rotation") else None)
            or p.name == "clustered"
        ),
        "dirichlet, clustered (or relabel/rotation with data.partition.base=dirichlet)",
    ),  # fmt: skip
    (
        "data.partition.clusters",
        "data.partition.name",
        lambda v: v in _CLUSTERED,
        "|".join(_CLUSTERED),
    ),  # fmt: skip
    ("data.partition.step", "data.partition.name", lambda v: v == "rotation", "rotation"),
    (
        "data.partition.base",
        "data.partition.name",
        lambda v: v in ("relabel", "rotation"),
        "relabel|rotation",
    ),  # fmt: skip
    ("data.partition.sigma", "data.partition.name", lambda v: v == "clustered", "clustered"),
    # Shakespeare's clients are its roles: a partition that deals samples out would be
    # ignored (iid is accepted there: configs/quickstart.yaml sets it; it changes nothing)
    (
        "data.partition.name",
        "data",
        lambda d: d.name != "shakespeare" or d.partition.name == "iid",
        "a dataset without clients of its own (shakespeare's are its roles)",
    ),  # fmt: skip
    ("data.partition.by", "data.partition.name", lambda v: v == "natural", "natural"),
    ("data.partition.values", "data.partition.name", lambda v: v == "natural", "natural"),
    ("data.test_split", "data.partition.name", lambda v: v == "natural", "natural"),
    ("data.train_ratio", "data.test_split", lambda v: v is None, "null"),
    ("data.partition.args", "data.partition.name", lambda v: v.startswith("flwr:"), "flwr:..."),
    *[
        (f"data.{key}", "data.name", lambda v: v.startswith("hf:"), "hf:<local path>")
        for key in ("split", "input_column", "label_column", "resize", "prompt_column",
                    "response_column")
    ],
    (
        "data.resize",
        "model.name",
        lambda v: v not in TOKENIZED_MODELS,
        f"a model of images (not {' or '.join(TOKENIZED_MODELS)}, which read a text column's "
        "tokens)",
    ),  # fmt: skip
    # a language model's tokens: Shakespeare's roles (shakespeare-lm) or an hf: text column
    # (fedsim/data/hf/text.py refuses them there on a column that is not text)
    *[
        (
            f"data.{key}",
            "data",
            lambda d: d.name in LM_DATASET_NAMES or d.name.startswith(HF_PREFIX),
            "|".join((*LM_DATASET_NAMES, "hf:<path> of a text column")),
        )
        for key in ("tokenizer", "max_length", "packing")
    ],
    ("client.betas", "client.optimizer", lambda v: v in ("adam", "adamw"), "adam|adamw"),
    ("client.momentum", "client.optimizer", lambda v: v == "sgd", "sgd"),
    ("client.nesterov", "client.momentum", lambda v: v > 0, "a momentum > 0"),
    ("client.epochs", "client.steps", lambda v: v is None, "null (steps replace epochs)"),
    ("client.epochs_by_client", "client.steps", lambda v: v is None, "null (steps replace epochs)"),
    ("eval.finetune_epochs", "eval.holdout_clients", lambda v: v > 0, "a count or fraction > 0"),
    ("eval.holdout_names", "eval.holdout_clients", lambda v: v == 0, "0 (one or the other)"),
    *[
        (f"system.{key}", "system.device_trace", lambda v: v is None, "null (a trace gives them)")
        for key in (
            "speeds", "time_per_sample", "upload_bandwidth", "download_bandwidth", "network_speeds"
        )
    ],  # fmt: skip
    (
        "system.network_speeds",
        "system",
        lambda s: s.upload_bandwidth is not None or s.download_bandwidth is not None,
        "system.upload_bandwidth or system.download_bandwidth set",
    ),
    ("system.availability", "system.availability_trace", lambda v: v is None, "null"),
    *[
        (f"system.{key}", "asynchronous.enabled", lambda v: v is False, "false (synchronous)")
        for key in ("overcommit", "deadline", "min_clients", "short_round")
    ],
    *[
        (
            f"system.{key}",
            "system",
            lambda s: s.gates_clients,
            "system.availability < 1, system.availability_trace, system.dropout > 0, "
            "system.overcommit > 1 or system.deadline set (without them a round keeps all it "
            "samples)",
        )
        for key in ("min_clients", "short_round")
    ],
    *[
        (f"tracking.wandb.{key}", "tracking.wandb.enabled", lambda v: v is True, "true")
        for key in ("project", "entity", "group", "tags", "mode", "max_client_series", "params")
    ],
]


def _get(cfg: Any, key: str) -> Any:
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def _default(cfg: Any, key: str) -> Any:
    *path, name = key.split(".")
    section = _get(cfg, ".".join(path)) if path else cfg
    field = next(f for f in dataclasses.fields(section) if f.name == name)
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory()  # type: ignore[misc]


def check_effective(cfg: Any) -> None:
    """ConfigError for a key set (not to its default) where nothing would read it."""
    for key, enabler, enables, needed in DEPENDENT:
        value = _get(cfg, key)
        if value == _default(cfg, key):
            continue
        switch = _get(cfg, enabler)
        if not enables(switch):
            section = enabler in ("data.partition", "data")  # named by its .name
            if dataclasses.is_dataclass(switch) and not section:  # a rule over several keys
                raise ConfigError(
                    key, value, f"acts only with {needed}, and this run has none: nothing "
                    "would read it; remove it or set one",
                )  # fmt: skip
            shown = switch.name if section else show_value(switch)
            where = f"{enabler}.name" if section else enabler
            raise ConfigError(
                key,
                value,
                f"acts only with {where}={needed}, and this run has {where}={shown}: nothing "
                "would read it; remove it or set that key",
            )
