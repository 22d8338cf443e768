"""A run's federated data assembled from its config: the one entry for every source.

``build_data`` reads ``data.*``: a Hugging Face source (``hf:``; a text column tokenized for a
pretrained language model: ``hf/text.py``) through the conversion cache under ``data.root``
(``hf/``), Shakespeare's roles tokenized for a language model
(``lm_text.py``), or a built-in or user loader once per process (``cached_dataset``); then
the partition and each client's split (``build.py``). ``assemble_data`` then carves each
client's validation split (``validation.py``) and holds out clients (``holdout.py``): the
federation a run trains on. The config is read by its attributes (the config layer sits
above this one).
"""

from __future__ import annotations

import functools
from typing import Any

from fedsim.data.build import NATURAL, build_federated_data
from fedsim.data.client_labels import permute_labels
from fedsim.data.datasets import Dataset, load_dataset
from fedsim.data.federated import FederatedData, stratified_subset
from fedsim.data.hf import hf_source, is_hf_name, load_hf
from fedsim.data.holdout import hold_out, holdout_count, named_ids
from fedsim.data.lm_text import load_lm_dataset
from fedsim.data.names import LM_DATASET_NAMES
from fedsim.data.prepared import check_prepared
from fedsim.data.validation import carve_validation
from fedsim.errors import ConfigError


@functools.lru_cache(maxsize=4)
def cached_dataset(name: str, root: str, download: bool) -> Dataset:
    """Load a dataset once per process (tests and sweeps reuse it)."""
    return load_dataset(name, root, download=download)


def build_data(cfg: Any, dataset: Dataset | None = None) -> FederatedData:
    """The config's (an ``ExperimentConfig``) dataset, or ``dataset`` (e.g. a subset of it),
    partitioned and split per client as the config says (raises ConfigError)."""
    d = cfg.data
    hf = None
    if dataset is None and is_hf_name(d.name):  # through the conversion cache under data.root
        check_prepared(d.name)  # a dataset `make data` prepares: made?
        hf = load_hf(hf_source(d, cfg.model), d.root)
        dataset = hf.dataset
    elif dataset is None and d.name in LM_DATASET_NAMES:  # tokenized by data.tokenizer
        dataset = load_lm_dataset(d, cfg.model.args)
    elif dataset is None:
        dataset = cached_dataset(d.name, d.root, d.download)
    if d.partition.name == NATURAL and d.max_samples is not None:
        raise ConfigError(
            "data.max_samples", d.max_samples, "does not apply to natural clients; use "
            "data.num_clients and data.min_samples (or null)",
        )  # fmt: skip
    data = build_federated_data(
        stratified_subset(dataset.normalized(d.normalize), d.max_samples),
        d.num_clients,
        d.partition.name,
        alpha=d.partition.alpha,
        classes_per_client=d.partition.classes_per_client,
        train_ratio=d.train_ratio,
        seed=cfg.seed,
        clusters=d.partition.clusters,
        step=d.partition.step,
        base=d.partition.base,
        sigma=d.partition.sigma,
        min_samples=d.min_samples,
        max_client_samples=d.max_client_samples,
        plays=d.plays,
        groups=None if hf is None else hf.groups,
        by=d.partition.by,
        flwr_args=d.partition.args,
        label_column=d.label_column,
        train_rows=None if hf is None else hf.train_rows,
        values=d.partition.values,
    )
    if d.permute_labels:  # each client its own label ids (client_labels.py)
        data = permute_labels(data, cfg.seed)
    if hf is not None:
        data.partition["data"] = hf.info  # partition.json: columns and the label map
    return data


def assemble_data(cfg: Any, data: FederatedData | None = None) -> FederatedData:
    """The federation a run trains on: the config's data (``build_data``; or ``data``, built
    already), each client's validation split carved out of its train split
    (``eval.validation_ratio``), then the held-out clients (``eval.holdout_clients``, or
    the clients ``eval.holdout_names`` names) moved behind the others as newcomers."""
    data = data if data is not None else build_data(cfg)
    data = carve_validation(data, cfg.eval.validation_ratio, cfg.seed)
    held = holdout_count(cfg.eval.holdout_clients, data.num_clients)
    named = cfg.eval.holdout_names
    ids = None if named is None else named_ids(data.partition, named)
    return hold_out(data, held, cfg.seed, ids)
