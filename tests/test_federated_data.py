"""FederatedData on real mnist-5k: splits, batches, class counts, summary, seeding."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest
import torch

from fedsim.data import ClientSplit, FederatedData, build_federated_data, load_dataset
from fedsim.data.datasets import ImageDataset
from fedsim.data.federated import split_train_test
from fedsim.data.partition import partition_labels
from fedsim.errors import ConfigError


@pytest.fixture(scope="module")
def dataset() -> ImageDataset:
    return load_dataset("mnist-5k", "unused")


@pytest.fixture(scope="module")
def fed(dataset: ImageDataset) -> FederatedData:
    return build_federated_data(dataset, 10, "dirichlet", alpha=0.5, seed=7)


@pytest.mark.parametrize(
    ("partition", "kwargs"),
    [("iid", {}), ("dirichlet", {"alpha": 0.1}), ("pathological", {"classes_per_client": 3})],
)
def test_splits_cover_each_client_partition(
    dataset: ImageDataset, partition: str, kwargs: dict
) -> None:
    data = build_federated_data(dataset, 12, partition, seed=11, **kwargs)
    parts = partition_labels(dataset.labels, 10, 12, partition, seed=11, **kwargs)
    assert data.num_clients == 12 and data.num_classes == 10
    for client, part in zip(data.clients, parts, strict=True):
        assert client.train.dtype == np.int64 and client.test.dtype == np.int64
        assert len(np.intersect1d(client.train, client.test)) == 0
        np.testing.assert_array_equal(np.sort(np.concatenate([client.train, client.test])), part)
        n = len(part)
        assert len(client.test) == math.ceil(0.25 * n) and len(client.train) == n - len(client.test)


def test_sizes_and_class_counts(fed: FederatedData, dataset: ImageDataset) -> None:
    train, test, both = fed.class_counts("train"), fed.class_counts("test"), fed.class_counts("all")
    assert train.shape == (10, 10) and train.dtype == np.int64
    np.testing.assert_array_equal(train + test, both)
    np.testing.assert_array_equal(both.sum(axis=0), np.bincount(dataset.labels))
    np.testing.assert_array_equal(train.sum(axis=1), fed.train_sizes())
    np.testing.assert_array_equal(test.sum(axis=1), fed.test_sizes())
    assert (
        fed.train_sizes().dtype == np.int64
        and fed.train_sizes().sum() + fed.test_sizes().sum() == 5000
    )
    with pytest.raises(ValueError, match="split='validation'"):
        fed.class_counts("validation")


def test_batch_normalized(fed: FederatedData, dataset: ImageDataset) -> None:
    indices = fed.clients[3].train[:16]
    images, labels = fed.batch(indices)
    assert images.shape == (16, 1, 28, 28) and images.dtype == torch.float32
    assert labels.dtype == torch.int64 and labels.shape == (16,)
    assert images.min() >= -1 and images.max() <= 1
    assert images.min() == -1 and images.max() == 1  # MNIST has black and white pixels
    expected = torch.from_numpy(dataset.images[indices].astype(np.float32) / 127.5 - 1)
    torch.testing.assert_close(images, expected)
    np.testing.assert_array_equal(labels.numpy(), dataset.labels[indices])
    # The batch is a fresh tensor: writing to it leaves the shared dataset alone.
    images.zero_()
    assert fed.dataset.images[indices].max() == 255


def test_batch_of_colour_images() -> None:
    images = np.zeros((4, 3, 32, 32), dtype=np.uint8)
    images[1, 2] = 255
    ds = ImageDataset("tiny", images, np.arange(4, dtype=np.int64), 4)
    fed = FederatedData(ds, [ClientSplit(np.array([0, 1]), np.array([2, 3]))])
    x, y = fed.batch(np.array([1]))
    assert x.shape == (1, 3, 32, 32) and y.tolist() == [1]
    assert x[0, 2].eq(1).all() and x[0, :2].eq(-1).all()


def test_split_rounding_like_sklearn() -> None:
    rng = np.random.default_rng(0)
    for n in range(2, 60):
        split = split_train_test(np.arange(n), 0.75, rng)
        n_test = math.ceil(0.25 * n)
        assert len(split.test) == n_test and len(split.train) == n - n_test
    one = split_train_test(np.array([5]), 0.75, rng)
    assert one.train.tolist() == [5] and len(one.test) == 0
    assert len(split_train_test(np.arange(2), 0.9, rng).test) == 1
    assert len(split_train_test(np.arange(10), 0.5, rng).test) == 5


def test_partition_summary_json(fed: FederatedData) -> None:
    summary = json.loads(json.dumps(fed.partition_summary()))
    assert summary["dataset"] == "mnist-5k" and summary["num_clients"] == 10
    assert summary["num_classes"] == 10
    assert summary["partition"] == {
        "name": "dirichlet",
        "seed": 7,
        "train_ratio": 0.75,
        "alpha": 0.5,
    }
    clients = summary["clients"]
    assert [c["client"] for c in clients] == list(range(10))
    assert [c["train"] for c in clients] == fed.train_sizes().tolist()
    assert [c["test_class_counts"] for c in clients] == fed.class_counts("test").tolist()
    for c in clients:
        assert (
            sum(c["train_class_counts"]) == c["train"] and sum(c["test_class_counts"]) == c["test"]
        )
    stats, train = summary["stats"], fed.train_sizes()
    assert stats["train_min"] == train.min() and stats["train_max"] == train.max()
    assert stats["train_mean"] == pytest.approx(train.mean())
    held = (fed.class_counts("all") > 0).sum(axis=1)
    assert stats["classes_per_client_mean"] == pytest.approx(held.mean())


def test_pathological_summary_counts_classes(dataset: ImageDataset) -> None:
    data = build_federated_data(dataset, 15, "pathological", classes_per_client=3)
    stats = data.partition_summary()["stats"]
    assert stats["classes_per_client_min"] == stats["classes_per_client_max"] == 3


def test_same_seed_same_data(dataset: ImageDataset) -> None:
    def splits(seed: int) -> list[np.ndarray]:
        data = build_federated_data(dataset, 8, "iid", seed=seed)
        return [a for c in data.clients for a in (c.train, c.test)]

    first, again, other = splits(1), splits(1), splits(2)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_clients_are_indices_into_one_dataset(fed: FederatedData, dataset: ImageDataset) -> None:
    assert fed.dataset is dataset
    restored = pickle.loads(pickle.dumps(fed))
    np.testing.assert_array_equal(restored.clients[0].train, fed.clients[0].train)


@pytest.mark.parametrize("ratio", [0.0, 1.0, 1.5, -0.1])
def test_bad_train_ratio(dataset: ImageDataset, ratio: float) -> None:
    with pytest.raises(ConfigError, match=rf"^data\.train_ratio={ratio}:"):
        build_federated_data(dataset, 4, "iid", train_ratio=ratio)


def test_bad_partition_is_reported(dataset: ImageDataset) -> None:
    with pytest.raises(ConfigError, match=r"^data\.num_clients=0:"):
        build_federated_data(dataset, 0, "iid")
    with pytest.raises(ConfigError, match=r"^data\.partition\.name='shards':"):
        build_federated_data(dataset, 4, "shards")
