"""LEAF's reference models (femnist_cnn, celeba_cnn): parameter counts computed by hand from
LEAF's layers, output shapes on any square size, the head FedPer keeps; and each shipped
configs/hf/ config running end to end on a small local set in its Hub schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from hf_fixtures import save_celeba, save_femnist, save_shakespeare

from fedsim.cli import main
from lightning_modules.leaf_cnn import CelebaCNN, FemnistCNN
from lightning_modules.registry import build_model


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_femnist_cnn_has_leafs_parameter_count():
    conv1 = 5 * 5 * 1 * 32 + 32  # 832
    conv2 = 5 * 5 * 32 * 64 + 64  # 51,264
    fc1 = (7 * 7 * 64) * 2048 + 2048  # 28 -> 14 -> 7 after two pools: 6,424,576
    fc = 2048 * 62 + 62  # 127,038
    assert conv1 + conv2 + fc1 + fc == 6_603_710
    assert count(FemnistCNN(in_channels=1, num_classes=62, image_size=28)) == 6_603_710


def test_celeba_cnn_has_leafs_parameter_count():
    conv1 = 3 * 3 * 3 * 32 + 32  # 896
    conv = 3 * 3 * 32 * 32 + 32  # 9,248, three times
    bn = 2 * 32  # BatchNorm's scale and shift, four times
    fc = (6 * 6 * 32) * 2 + 2  # 84 -> 42 -> 21 -> 11 -> 6 (ceil): 2,306
    assert conv1 + 3 * conv + 4 * bn + fc == 31_202
    assert count(CelebaCNN(in_channels=3, num_classes=2, image_size=84)) == 31_202


@pytest.mark.parametrize(
    ("cls", "channels", "side", "classes", "width"),
    [
        (FemnistCNN, 1, 28, 62, 2048),
        (FemnistCNN, 3, 32, 10, 2048),
        (FemnistCNN, 1, 30, 5, 2048),  # 30 -> 15 -> 7 (floor)
        (CelebaCNN, 3, 84, 2, 32 * 6 * 6),
        (CelebaCNN, 1, 28, 4, 32 * 2 * 2),  # 28 -> 14 -> 7 -> 4 -> 2
        (CelebaCNN, 3, 21, 2, 32 * 2 * 2),  # 21 -> 11 -> 6 -> 3 -> 2
    ],
)
def test_any_square_size_and_channels_give_logits_and_features(cls, channels, side, classes, width):
    model = cls(in_channels=channels, num_classes=classes, image_size=side).eval()
    x = torch.rand(4, channels, side, side)
    assert model.features(x).shape == (4, width)
    assert model(x).shape == (4, classes)


@pytest.mark.parametrize("name", ["femnist_cnn", "celeba_cnn"])
def test_the_head_is_the_last_dense_layer(name):
    model = build_model(name, in_channels=3, num_classes=7, image_size=32, lr=0.01)
    assert model.block_names[-1] == "fc" and model.lr == 0.01
    assert model.head_parameters() == ["fc.weight", "fc.bias"]
    assert tuple(model.fc.weight.shape)[0] == 7
    body = set(model.body_parameters())  # parameters and float buffers (BatchNorm's stats)
    state = {n for n, t in model.state_dict().items() if t.is_floating_point()}
    assert not body & {"fc.weight", "fc.bias"} and body | {"fc.weight", "fc.bias"} == state


def test_celeba_cnn_batchnorm_is_in_its_conv_blocks():
    model = CelebaCNN()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(norms) == 4 and all(m.eps == 1e-3 for m in norms)
    assert "conv1.1.running_mean" in model.block_parameters("conv1")


def test_weights_start_as_tensorflows_defaults():
    """Glorot-uniform kernels within their bound, zero biases (LEAF's TensorFlow layers)."""
    model = FemnistCNN()
    bound = (6 / (3136 + 2048)) ** 0.5
    assert model.fc1[0].weight.abs().max() <= bound
    assert model.fc1[0].weight.abs().max() > 0.9 * bound
    assert all(not b.any() for n, b in model.named_parameters() if n.endswith("bias"))


# ---------------------------------------------------------------- the shipped hf configs

TINY = ["rounds=1", "runtime.executor=local", "client.batch_size=20", "--no-progress"]


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("leaf")
    return {
        "femnist": save_femnist(folder)[0],
        "celeba": save_celeba(folder),
        "shakespeare": save_shakespeare(folder)[0],
    }


@pytest.mark.parametrize(
    ("dataset", "model", "classes"),
    [("femnist", "femnist_cnn", 62), ("celeba", "celeba_cnn", 2), ("shakespeare", "char_lstm", 80)],
)
def test_the_shipped_config_runs_on_a_local_copy(copies, tmp_path, dataset, model, classes):
    config = f"configs/hf/{dataset}-natural-fedavg.yaml"
    out = tmp_path / "run"
    small = [f"data.name=hf:{copies[dataset]}", "data.num_clients=3", "data.min_samples=10"]
    assert main(["run", config, *small, *TINY, "--out", str(out)]) == 0
    shipped = yaml.safe_load(Path(config).read_text())
    assert shipped["model"]["name"] == model
    assert shipped["data"]["partition"]["name"] == "natural"
    partition = json.loads((out / "partition.json").read_text())
    assert partition["num_clients"] == 3 and partition["num_classes"] == classes
    summary = json.loads((out / "summary.json").read_text())
    assert summary
