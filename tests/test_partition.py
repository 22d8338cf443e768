"""Partitions of real labels (mnist-5k): coverage, class structure, skew, seeding, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.data.datasets import load_dataset
from fedsim.data.partition import (
    PARTITION_NAMES,
    least_samples,
    partition_dirichlet,
    partition_labels,
    partition_pathological,
    pathological_classes,
)
from fedsim.errors import ConfigError


@pytest.fixture(scope="module")
def labels() -> np.ndarray:
    return load_dataset("mnist-5k", "unused").labels


def class_counts(labels: np.ndarray, parts: list[np.ndarray], num_classes: int = 10) -> np.ndarray:
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


def assert_well_formed(parts: list[np.ndarray], num_samples: int, exact: bool) -> None:
    for part in parts:
        assert part.dtype == np.int64
        assert np.all(np.diff(part) > 0), "indices must be sorted and unique"
    merged = np.concatenate(parts)
    assert len(np.unique(merged)) == len(merged), "a sample was assigned twice"
    assert merged.size == 0 or (merged.min() >= 0 and merged.max() < num_samples)
    if exact:
        assert len(merged) == num_samples


def mean_entropy(counts: np.ndarray) -> float:
    p = counts / counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log(p), 0.0)
    return float(terms.sum(axis=1).mean())


@pytest.mark.parametrize("scheme", ["iid", "dirichlet"])
@pytest.mark.parametrize("num_clients", [1, 7, 20])
def test_every_sample_once(labels: np.ndarray, scheme: str, num_clients: int) -> None:
    parts = partition_labels(labels, 10, num_clients, scheme, alpha=0.3, seed=3)
    assert len(parts) == num_clients
    assert_well_formed(parts, len(labels), exact=True)
    np.testing.assert_array_equal(class_counts(labels, parts).sum(axis=0), np.bincount(labels))


def test_iid_sizes_and_classes(labels: np.ndarray) -> None:
    parts = partition_labels(labels, 10, 20, "iid")
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert (class_counts(labels, parts) > 0).all()  # 250 random samples cover all 10 classes


def test_dirichlet_default_min_size(labels: np.ndarray) -> None:
    assert least_samples(5000, 20) == 40 and least_samples(5000, 100) == 25
    for num_clients in (10, 20):
        parts = partition_labels(labels, 10, num_clients, "dirichlet", alpha=0.1, seed=1)
        assert min(len(p) for p in parts) >= least_samples(len(labels), num_clients)


def test_dirichlet_explicit_min_size_and_failure(labels: np.ndarray) -> None:
    parts = partition_dirichlet(labels, 10, 0.5, np.random.default_rng(0), min_size=300)
    assert min(len(p) for p in parts) >= 300
    with pytest.raises(ConfigError) as info:
        partition_dirichlet(labels, 10, 0.05, np.random.default_rng(0), min_size=499, max_tries=3)
    assert "data.partition.alpha=0.05" in str(info.value) and "3 Dirichlet draws" in str(info.value)


def test_dirichlet_no_client_far_beyond_fair_share(labels: np.ndarray) -> None:
    # A client stops receiving classes once it holds >= N / clients samples, so it can exceed
    # that only by its share of the one class that pushed it over.
    parts = partition_labels(labels, 10, 10, "dirichlet", alpha=0.1, seed=5)
    assert max(len(p) for p in parts) <= len(labels) / 10 + 500


def test_smaller_alpha_more_skew(labels: np.ndarray) -> None:
    entropy = {}
    for alpha in (0.1, 1.0, 100.0):
        entropy[alpha] = np.mean(
            [
                mean_entropy(
                    class_counts(
                        labels, partition_labels(labels, 10, 10, "dirichlet", alpha=alpha, seed=s)
                    )
                )
                for s in range(3)
            ]
        )
    assert entropy[0.1] < entropy[1.0] < entropy[100.0] <= np.log(10) + 1e-9
    assert entropy[100.0] > 0.95 * np.log(10)


@pytest.mark.parametrize(
    ("num_clients", "k"),
    [(20, 2), (10, 1), (15, 3), (7, 4), (13, 7), (3, 10), (20, 10), (9, 6), (100, 2)],
)
def test_pathological_exactly_k_classes(labels: np.ndarray, num_clients: int, k: int) -> None:
    parts = partition_labels(labels, 10, num_clients, "pathological", classes_per_client=k, seed=2)
    assert_well_formed(parts, len(labels), exact=False)
    counts = class_counts(labels, parts)
    for client in range(num_clients):
        held = set(np.flatnonzero(counts[client]))
        assert held == set(pathological_classes(client, k, 10)), client
        assert len(held) == k
    # Every class somebody holds is fully handed out; classes nobody holds stay unassigned.
    held_classes = {c for client in range(num_clients) for c in pathological_classes(client, k, 10)}
    histogram = np.bincount(labels)
    for c in range(10):
        assert counts[:, c].sum() == (histogram[c] if c in held_classes else 0)


def test_pathological_few_clients_leave_classes_out(labels: np.ndarray) -> None:
    parts = partition_labels(labels, 10, 2, "pathological", classes_per_client=2)
    assert set(np.unique(labels[np.concatenate(parts)])) == {0, 1, 2, 3}


def test_pathological_unbalanced_vs_balanced(labels: np.ndarray) -> None:
    rng = np.random.default_rng(0)
    unbalanced = [len(p) for p in partition_pathological(labels, 20, 2, 10, rng)]
    balanced = [len(p) for p in partition_pathological(labels, 20, 2, 10, rng, balance=True)]
    assert np.std(unbalanced) > 5 * np.std(balanced)
    # Balanced: each of a class's 4 holders gets 125 (500 / 4) of it, so every client 250.
    assert set(balanced) == {250}


def test_pathological_pfllib_counts() -> None:
    # One class of 100 samples, 4 holders (K=1): per = 25, least = int(min(40, 100/4/2)) = 12,
    # so 3 holders draw from [max(25/10, 12/1), 25) = [12, 25) and the last gets the rest.
    labels = np.zeros(100, dtype=np.int64)
    parts = partition_pathological(labels, 4, 1, 1, np.random.default_rng(0))
    sizes = [len(p) for p in parts]
    assert all(12 <= s < 25 for s in sizes[:3]) and sum(sizes) == 100 and sizes[3] > 25


def test_pathological_tiny_class_falls_back_to_equal_counts() -> None:
    labels = np.repeat(np.arange(2), 3)  # 3 samples per class, 3 holders each: per = 1
    parts = partition_pathological(labels, 6, 1, 2, np.random.default_rng(0))
    assert [len(p) for p in parts] == [1] * 6


def test_pathological_class_too_small_for_its_holders() -> None:
    labels = np.array([0, 0, 1, 1, 1, 1])
    with pytest.raises(ConfigError, match="class 0 has 2 samples but 3 clients"):
        partition_labels(labels, 2, 6, "pathological", classes_per_client=1)


@pytest.mark.parametrize("scheme", PARTITION_NAMES)
def test_seeding(labels: np.ndarray, scheme: str) -> None:
    def run(seed: int) -> list[np.ndarray]:
        return partition_labels(labels, 10, 10, scheme, alpha=0.5, seed=seed)

    first, again, other = run(4), run(4), run(5)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "key", "value"),
    [
        ({"num_clients": 0}, "data.num_clients", "0"),
        ({"num_clients": 5001}, "data.num_clients", "5001"),
        ({"num_clients": 2.5}, "data.num_clients", "2.5"),
        ({"scheme": "dirichlet", "alpha": 0.0}, "data.partition.alpha", "0.0"),
        ({"scheme": "dirichlet", "alpha": -1}, "data.partition.alpha", "-1"),
        (
            {"scheme": "pathological", "classes_per_client": 0},
            "data.partition.classes_per_client",
            "0",
        ),
        (
            {"scheme": "pathological", "classes_per_client": 11},
            "data.partition.classes_per_client",
            "11",
        ),
        ({"scheme": "pat"}, "data.partition.name", "'pat'"),
        ({"seed": -1}, "seed", "-1"),
    ],
)
def test_bad_input(labels: np.ndarray, kwargs: dict, key: str, value: str) -> None:
    args = {"num_clients": 10, "scheme": "iid", **kwargs}
    num_clients, scheme = args.pop("num_clients"), args.pop("scheme")
    with pytest.raises(ConfigError) as info:
        partition_labels(labels, 10, num_clients, scheme, **args)
    message = str(info.value)
    assert message.startswith(f"{key}={value}:") and "\n" not in message
    if key == "data.partition.name":
        assert all(name in message for name in PARTITION_NAMES)


@settings(max_examples=40, deadline=None)
@given(
    class_sizes=st.lists(st.integers(min_value=6, max_value=40), min_size=2, max_size=6),
    num_clients=st.integers(min_value=1, max_value=6),
    scheme=st.sampled_from(PARTITION_NAMES),
    alpha=st.floats(min_value=0.05, max_value=50),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_property_assignment(
    class_sizes: list[int], num_clients: int, scheme: str, alpha: float, seed: int
) -> None:
    labels = np.repeat(np.arange(len(class_sizes)), class_sizes)
    num_classes = len(class_sizes)
    k = min(2, num_classes)
    try:
        parts = partition_labels(
            labels, num_classes, num_clients, scheme, alpha=alpha, classes_per_client=k, seed=seed
        )
    except ConfigError as refused:  # a small alpha over few samples: refused, not looped on
        message = str(refused)
        assert scheme == "dirichlet" and "Dirichlet draws never gave" in message, message
        assert message.startswith(f"data.partition.alpha={alpha}") and "\n" not in message
        return
    assert len(parts) == num_clients
    assert_well_formed(parts, len(labels), exact=scheme != "pathological")
    if scheme == "pathological":
        counts = class_counts(labels, parts, num_classes)
        assert ((counts > 0).sum(axis=1) == k).all()
