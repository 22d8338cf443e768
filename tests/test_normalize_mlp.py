"""``data.normalize`` (pfllib | standard | none) and the built-in ``mlp`` with ``model.hidden``
(issue 26): what a batch's pixels become, the default left as it was, one-line refusals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from helpers import refused_check

from fedsim.config import load_config
from fedsim.data.dataset_types import PUBLISHED_MEAN_STD, ImageDataset
from fedsim.data.text import TextDataset
from fedsim.errors import ConfigError
from fedsim.simulation import Simulation, build_data
from lightning_modules.mlp import MLP
from lightning_modules.registry import build_model

RELABEL = [
    "data.name=mnist-5k",
    "data.num_clients=20",
    "data.partition.name=relabel",
    "data.partition.clusters=4",
    "algorithm.name=local",
]


def colour_images() -> ImageDataset:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(6, 3, 4, 4), dtype=np.uint8)
    return ImageDataset("cifar10", images, np.arange(6, dtype=np.int64) % 3, 10)


def test_the_default_is_pfllibs_minus_one_to_one_exactly():
    data = colour_images()
    assert data.normalize == "pfllib" and data.normalized("pfllib") is data
    x, _ = data.batch(np.arange(6))
    expected = torch.from_numpy(data.images).to(torch.float32).div_(127.5).sub_(1.0)
    assert torch.equal(x, expected)  # the very operations of before: same bits


def test_standard_and_none_per_channel():
    data = colour_images()
    raw = torch.from_numpy(data.images).to(torch.float32) / 255.0
    x, _ = data.normalized("none").batch(np.arange(6))
    assert torch.equal(x, raw)
    x, _ = data.normalized("standard").batch(np.arange(6))
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in PUBLISHED_MEAN_STD["cifar10"])
    torch.testing.assert_close(x, (raw - mean) / std, rtol=0, atol=1e-6)
    assert data.normalized("none").images is data.images  # shared, not copied


def test_mnist_standard_is_the_published_mean_and_std_and_survives_the_partition():
    cfg = load_config(None, [*RELABEL, "data.normalize=standard"])
    data = build_data(cfg)
    assert data.dataset.normalize == "standard"  # kept through subset and relabel
    x, _ = data.batch(data.clients[0].train[:50])
    raw = torch.from_numpy(data.dataset.images[data.clients[0].train[:50]]).float() / 255
    torch.testing.assert_close(x, (raw - 0.1307) / 0.3081, rtol=0, atol=1e-6)
    default = build_data(load_config(None, RELABEL))
    assert np.array_equal(default.dataset.labels, data.dataset.labels)  # same federation
    assert [c.train.tolist() for c in default.clients] == [c.train.tolist() for c in data.clients]


def test_text_data_and_unknown_statistics_refuse_in_one_line():
    text = TextDataset("shakespeare", np.zeros(100, np.uint8), np.arange(3), np.zeros(3, np.int64))
    assert text.normalized("pfllib") is text
    with pytest.raises(ConfigError, match="data.normalize.*image datasets only"):
        text.normalized("standard")
    custom = dataclasses.replace(colour_images(), name="mine")
    assert custom.normalized("none").normalize == "none"
    with pytest.raises(ConfigError, match="no published mean and std for mine"):
        custom.normalized("standard")


@pytest.mark.parametrize(
    "overrides, key",
    [
        ("data.normalize=zscore", "data.normalize"),
        ("model.hidden=[0]", "model.hidden"),
        ("model.hidden=[]", "model.hidden"),
        ("model.hidden=[64,32]", "model.hidden"),  # fedavg_cnn has one hidden layer
        ("model.name=femnist_cnn model.hidden=[64]", "model.hidden"),  # it has no option
    ],
)
def test_bad_values_are_one_line_errors(overrides, key, capsys, tmp_path):
    line = refused_check(overrides, capsys, tmp_path)
    print(line)
    assert f"{key}=" in line, line


def test_mlp_is_784_200_200_10_with_torchs_default_init():
    torch.manual_seed(0)
    model = build_model("mlp", in_channels=1, num_classes=10, image_size=28)
    torch.manual_seed(0)
    layers = [torch.nn.Linear(784, 200), torch.nn.Linear(200, 200), torch.nn.Linear(200, 10)]
    ours = [model.fc1[0], model.fc2[0], model.fc]
    for mine, plain in zip(ours, layers, strict=True):
        assert torch.equal(mine.weight, plain.weight) and torch.equal(mine.bias, plain.bias)
    assert sum(p.numel() for p in model.parameters()) == 199_210
    assert model.block_names == ("fc1", "fc2", "fc")
    assert model(torch.zeros(3, 1, 28, 28)).shape == (3, 10)


def test_model_hidden_sets_the_mlps_layers():
    sim = Simulation(load_config(None, [*RELABEL, "model.name=mlp", "model.hidden=[32, 16, 8]"]))
    assert sim.federation.block_names == ["fc1", "fc2", "fc3", "fc"]
    assert sim.initial_params.numel() == 784 * 32 + 32 + 32 * 16 + 16 + 16 * 8 + 8 + 8 * 10 + 10
    assert sim.worker_spec.model.kwargs["hidden"] == (32, 16, 8)
    assert MLP(hidden=(5,)).block_names == ("fc1", "fc")
