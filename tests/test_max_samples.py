"""``data.max_samples``: a stratified, fixed subset of the dataset, taken before partitioning."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.config import load_config
from fedsim.data.federated import stratified_subset
from fedsim.errors import ConfigError
from fedsim.simulation import build_data, cached_dataset

BASE = ["data.name=mnist-5k", "data.num_clients=5", "data.partition.name=iid"]


@pytest.fixture(scope="module")
def mnist5k():
    return cached_dataset("mnist-5k", "data", False)


def test_each_class_keeps_its_share(mnist5k):
    subset = stratified_subset(mnist5k, 1000)
    full = np.bincount(mnist5k.labels, minlength=10)
    kept = np.bincount(subset.labels, minlength=10)
    assert kept.tolist() == [round(1000 * n / len(mnist5k)) for n in full]
    assert abs(len(subset) - 1000) <= 5  # each class rounded on its own
    assert np.abs(kept / len(subset) - full / len(mnist5k)).max() < 1e-3
    assert subset.num_classes == 10 and subset.name == mnist5k.name


def test_the_subset_is_fixed_and_drawn_from_the_dataset(mnist5k):
    a, b = stratified_subset(mnist5k, 700), stratified_subset(mnist5k, 700)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.labels, b.labels)
    # every kept image is one of the dataset's, with its label, in dataset order
    flat = mnist5k.images.reshape(len(mnist5k), -1)
    rows = {row.tobytes(): i for i, row in enumerate(flat)}
    where = [rows[row.tobytes()] for row in a.images.reshape(len(a), -1)]
    assert where == sorted(where) and np.array_equal(mnist5k.labels[where], a.labels)


def test_null_or_not_smaller_is_the_whole_dataset(mnist5k):
    assert stratified_subset(mnist5k, None) is mnist5k
    assert stratified_subset(mnist5k, len(mnist5k)) is mnist5k
    assert stratified_subset(mnist5k, 10**9) is mnist5k


def test_every_seed_partitions_the_same_subset():
    configs = [load_config(None, [*BASE, "data.max_samples=600", f"seed={s}"]) for s in (0, 1)]
    datas = [build_data(cfg) for cfg in configs]
    for data in datas:
        assert len(data.dataset) == data.partition_summary()["num_samples"] == 600
        assert sum(len(c.all) for c in data.clients) == 600
    assert np.array_equal(datas[0].dataset.labels, datas[1].dataset.labels)
    assert not np.array_equal(datas[0].clients[0].train, datas[1].clients[0].train)


def test_null_leaves_the_data_as_it_was():
    plain = build_data(load_config(None, BASE))
    null = build_data(load_config(None, [*BASE, "data.max_samples=null"]))
    assert plain.dataset is null.dataset  # the cached dataset itself, not a copy
    for a, b in zip(plain.clients, null.clients, strict=True):
        assert np.array_equal(a.train, b.train) and np.array_equal(a.test, b.test)


@pytest.mark.parametrize(
    "value, message",
    [
        ("0", "data.max_samples=0: must be >= 1 (or null: all samples)"),
        ("-5", "data.max_samples=-5: must be >= 1 (or null: all samples)"),
        ("2.5", "data.max_samples=2.5: must be an integer"),
        ("all", "data.max_samples='all': must be an integer"),
    ],
)
def test_bad_value_is_a_one_line_config_error(value, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"data.max_samples={value}"])
    assert str(info.value) == message


def test_workers_only_with_the_ray_executor():
    with pytest.raises(ConfigError, match="runtime.workers=2: only with runtime.executor=ray"):
        load_config(None, ["runtime.executor=local", "runtime.workers=2"])
    assert load_config(None, ["runtime.executor=ray", "runtime.workers=2"]).runtime.workers == 2
    assert load_config(None, ["runtime.executor=local"]).runtime.workers is None
