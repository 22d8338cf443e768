"""Cluster-structured settings (issue 14) on mnist-5k: relabel, rotation, clustered."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torchvision.transforms.functional import InterpolationMode, rotate

from fedsim.cli import main
from fedsim.data import build_federated_data, load_dataset
from fedsim.data.datasets import ImageDataset
from fedsim.data.federated import FederatedData
from fedsim.data.heterogeneity import SIGMA_DEFINITION, rotate_images
from fedsim.errors import ConfigError

CLIENTS = 8


@pytest.fixture(scope="module")
def digits() -> ImageDataset:
    return load_dataset("mnist-5k", "unused")


def owner_of(data: FederatedData) -> np.ndarray:
    owner = np.full(len(data.dataset), -1)
    for k, client in enumerate(data.clients):
        owner[client.all] = k
    return owner


def test_relabel_permutes_per_cluster(digits: ImageDataset) -> None:
    data = build_federated_data(digits, CLIENTS, "relabel", seed=3)
    info = data.partition
    assert info["clusters"] == 4 and info["client_clusters"] == [k % 4 for k in range(CLIENTS)]
    perms = np.array(info["permutations"])
    assert perms.shape == (4, 10)
    np.testing.assert_array_equal(perms[0], np.arange(10))  # cluster 0: identity
    assert len({tuple(p) for p in perms}) == 4  # permutations differ across clusters
    for p in perms:
        assert sorted(p) == list(range(10))
    assert data.dataset.images is digits.images  # labels only: no image copy
    for k, client in enumerate(data.clients):
        perm = perms[k % 4]
        for idx in (client.train, client.test):  # test labels permuted the same way
            np.testing.assert_array_equal(data.dataset.labels[idx], perm[digits.labels[idx]])
    # class_counts see the permuted labels
    k = 1
    expected = np.bincount(perms[1][digits.labels[data.clients[k].train]], minlength=10)
    np.testing.assert_array_equal(data.class_counts("train")[k], expected)
    again = build_federated_data(digits, CLIENTS, "relabel", seed=3)
    np.testing.assert_array_equal(again.dataset.labels, data.dataset.labels)
    other = build_federated_data(digits, CLIENTS, "relabel", seed=4)
    assert other.partition["permutations"] != info["permutations"]


def test_relabel_with_a_base_partition(digits: ImageDataset) -> None:
    data = build_federated_data(
        digits, CLIENTS, "relabel", base="pathological", classes_per_client=2, clusters=2
    )
    assert data.partition["base"] == "pathological" and data.partition["clusters"] == 2
    held = (data.class_counts("all") > 0).sum(axis=1)
    assert held.max() == 2  # still two classes a client, under new names


def test_default_clusters_at_most_the_clients(digits: ImageDataset) -> None:
    data = build_federated_data(digits, 2, "relabel")
    assert data.partition["clusters"] == 2 and len(data.partition["permutations"]) == 2
    with pytest.raises(ConfigError, match=r"^data\.partition\.clusters=3: at most"):
        build_federated_data(digits, 2, "relabel", clusters=3)


def hand_rotated(images: np.ndarray, angle: float) -> np.ndarray:
    mode = InterpolationMode.NEAREST if angle % 90 == 0 else InterpolationMode.BILINEAR
    return rotate(torch.from_numpy(images), float(angle), mode).numpy()


@pytest.mark.parametrize("clusters, angles", [(None, [0, 4, 8, 28]), (4, [0, 90, 180, 270])])
def test_rotation_angles(digits: ImageDataset, clusters, angles) -> None:
    data = build_federated_data(digits, CLIENTS, "rotation", clusters=clusters, seed=1)
    recorded = data.partition["angles"]
    np.testing.assert_allclose([recorded[k] for k in (0, 1, 2, 3 if clusters else 7)], angles)
    np.testing.assert_array_equal(data.dataset.labels, digits.labels)
    for k in range(CLIENTS):
        for idx in (data.clients[k].train[:5], data.clients[k].test[:5]):
            expected = hand_rotated(digits.images[idx], recorded[k])
            np.testing.assert_array_equal(data.dataset.images[idx], expected)
    assert not np.array_equal(
        data.dataset.images[data.clients[1].train[:5]], digits.images[data.clients[1].train[:5]]
    )
    if clusters:
        assert data.partition["client_clusters"] == [k % 4 for k in range(CLIENTS)]
    else:
        assert data.partition["step"] == 4.0 and "client_clusters" not in data.partition


def test_rotate_images_direction() -> None:
    image = np.zeros((1, 1, 3, 3), dtype=np.uint8)
    image[0, 0, 0, 2] = 255  # top right
    turned = rotate_images(image, 90)  # counter-clockwise: top right -> top left
    assert turned[0, 0, 0, 0] == 255 and turned.sum() == 255
    assert np.array_equal(rotate_images(image, 360 + 90), turned)


def cluster_distances(data: FederatedData) -> tuple[float, float]:
    """Mean L1 distance of clients' class mixes to their own cluster's mean mix, and to the
    nearest other cluster's."""
    counts = data.class_counts("all").astype(float)
    mix = counts / counts.sum(axis=1, keepdims=True)
    member = np.array(data.partition["client_clusters"])
    centers = np.stack([mix[member == c].mean(axis=0) for c in range(member.max() + 1)])
    dist = np.abs(mix[:, None, :] - centers[None, :, :]).sum(axis=2)
    own = dist[np.arange(len(mix)), member]
    dist[np.arange(len(mix)), member] = np.inf
    return float(own.mean()), float(dist.min(axis=1).mean())


def test_clustered_sigma_controls_spread(digits: ImageDataset) -> None:
    tight = build_federated_data(digits, 16, "clustered", sigma=0.01, alpha=0.5, seed=2)
    loose = build_federated_data(digits, 16, "clustered", sigma=10.0, alpha=0.5, seed=2)
    own_t, other_t = cluster_distances(tight)
    own_l, _ = cluster_distances(loose)
    assert own_t < 0.25 * other_t, (own_t, other_t)
    assert own_l > 3 * own_t, (own_l, own_t)
    info = tight.partition
    assert info["clusters"] == 4 and info["sigma"] == 0.01
    assert info["sigma_definition"] == SIGMA_DEFINITION
    assert np.array(info["cluster_distributions"]).shape == (4, 10)
    assert np.array(info["client_distributions"]).shape == (16, 10)
    assert (owner_of(tight) >= 0).all()  # every sample used
    again = build_federated_data(digits, 16, "clustered", sigma=0.01, alpha=0.5, seed=2)
    assert again.partition == info


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"partition": "relabel", "clusters": 9}, "data.partition.clusters=9: at most"),
        ({"partition": "clustered", "clusters": 0}, "data.partition.clusters=0: must be >= 1"),
        ({"partition": "rotation", "step": float("nan")}, "data.partition.step=nan: must be a"),
        ({"partition": "relabel", "base": "shards"}, "data.partition.base='shards': allowed:"),
        ({"partition": "clustered", "sigma": 0.0}, "data.partition.sigma=0.0: must be > 0"),
        ({"partition": "shards"}, "data.partition.name='shards': allowed: iid"),
    ],
)
def test_bad_settings(digits: ImageDataset, kwargs, expected) -> None:
    with pytest.raises(ConfigError) as info:
        build_federated_data(digits, CLIENTS, **kwargs)
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)


def test_one_round_run_records_clusters(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    args = ["rounds=1", "data.partition.name=relabel", "runtime.executor=local"]
    code = main(
        [
            "run",
            "configs/quickstart.yaml",
            *args,
            "data.num_clients=8",
            "data.max_samples=1000",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    partition = json.loads((out / "partition.json").read_text())["partition"]
    assert partition["name"] == "relabel" and partition["client_clusters"][:5] == [0, 1, 2, 3, 0]
    assert len(partition["permutations"]) == 4


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["data.partition.name=relabel", "data.partition.clusters=9"], "clusters=9: at most"),
        (["data.partition.name=relabel", "data.partition.clusters=0"], "clusters=0: must be >="),
        (["data.partition.name=rotation", "data.partition.step=.inf"], "step=inf: must be a"),
        (["data.partition.name=rotation", "data.partition.step=left"], "step='left': must be"),
        (["data.partition.name=relabel", "data.partition.base=shards"], "base='shards': allowed"),
        (["data.partition.name=clustered", "data.partition.sigma=-1"], "sigma=-1.0: must be > 0"),
    ],
)
def test_bad_input_one_line_exit_2_no_folder(overrides, expected, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    argv = ["run", "configs/quickstart.yaml", "rounds=1", "data.num_clients=8", *overrides]
    code = main([*argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and err.count("\n") == 1, err
    assert not out.exists()
