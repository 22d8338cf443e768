"""FedAvgCNN's widths as options: PFLlib's by default, narrower for quick runs, and a
wrong width refused in one line naming the key before anything is built or written."""

from __future__ import annotations

import pytest
import torch

from fedsim.errors import ConfigError
from lightning_modules.cnn import FedAvgCNN, FedAvgCNNBN


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_default_is_pfllibs_and_the_options_set_each_layer():
    assert n_params(FedAvgCNN()) == 582_026  # PFLlib's FedAvgCNN on 28x28 gray digits
    narrow = FedAvgCNN(channels=(16, 32), hidden=(128,))
    # conv 1*16*25+16, conv 16*32*25+32, fc 512*128+128, out 128*10+10
    assert n_params(narrow) == 416 + 12_832 + 65_664 + 1_290 == 80_202
    assert narrow.conv2[0].out_channels == 32 and narrow.fc.in_features == 128
    assert narrow.features(torch.zeros(3, 1, 28, 28)).shape == (3, 128)
    bn = FedAvgCNNBN(in_channels=3, image_size=32, channels=(8, 12), hidden=(20,))
    assert (bn.bn1.num_features, bn.bn2.num_features, bn.fc1.in_features) == (8, 12, 12 * 25)
    assert bn(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"channels": (16,)}, "model.args.channels"),
        ({"channels": (16, 0)}, "model.args.channels"),
        ({"channels": 16}, "model.args.channels"),
        ({"hidden": (128, 64)}, "model.hidden"),
        ({"hidden": (True,)}, "model.hidden"),
    ],
)
def test_a_wrong_width_names_its_key(kwargs: dict, key: str):
    for cls in (FedAvgCNN, FedAvgCNNBN):
        with pytest.raises(ConfigError) as error:
            cls(**kwargs)
        assert error.value.key == key


def test_the_cli_check_takes_the_widths_and_refuses_a_wrong_one(capsys):
    from fedsim.cli import main

    narrow = ["model.args.channels=[16,32]", "model.hidden=[128]"]
    assert main(["run", "configs/quickstart.yaml", *narrow, "--check"]) == 0
    assert "fedavg_cnn with 80,202 parameters" in capsys.readouterr().out
    assert main(["run", "configs/quickstart.yaml", "model.args.channels=[16]", "--check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fedsim: error: model.args.channels=[16]: two integers >= 1: the filters of "
                   "the two convolutions (default [32, 64])"]  # fmt: skip
