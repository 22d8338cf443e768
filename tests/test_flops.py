"""What a client round costs (``eval.count_flops``): FedAvgCNN's FLOPs for one batch against a
hand count of its convolutions and linear layers, and the algorithms' extra passes as the
multiples they must be (Ditto's personal pass doubles a round; MOON adds two forwards of
the representation; FedRep's head epoch, in ``client_start``, one forward)."""

from __future__ import annotations

import csv
import json

import torch
from helpers import TINY_MNIST

from fedsim.config import load_config
from fedsim.experiment import run_experiment
from fedsim.runtime.flops import batch_flops
from lightning_modules.cnn import FedAvgCNN


def conv(c_in: int, c_out: int, side_out: int, k: int, n: int) -> int:
    return 2 * c_out * side_out * side_out * c_in * k * k * n  # a multiply and an add each


def linear(d_in: int, d_out: int, n: int) -> int:
    return 2 * d_in * d_out * n


def test_fedavgcnn_flops_for_one_batch_by_hand() -> None:
    n = 10
    model = FedAvgCNN(in_channels=1, num_classes=10, image_size=28)
    x, y = torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))
    conv1 = conv(1, 32, 24, 5, n)  # 28 -> 24, pooled to 12
    conv2 = conv(32, 64, 8, 5, n)  # 12 -> 8, pooled to 4: 64 * 4 * 4 = 1024 features
    fc1, fc = linear(1024, 512, n), linear(512, 10, n)
    forward = conv1 + conv2 + fc1 + fc
    assert forward == 85_340_160
    # backward: every layer's weight gradient (as many FLOPs as its forward) and every input
    # gradient but the first convolution's (the images need none)
    assert batch_flops(model, x, y) == (forward, forward + 2 * forward - conv1)
    assert all(p.grad is None for p in model.parameters())  # the count left no gradient


def _client_flops(tmp_path, algorithm: str) -> tuple[dict[int, float], dict[int, int]]:
    cfg = load_config("configs/quickstart.yaml", [
        *TINY_MNIST, "rounds=1", "data.max_samples=120", "data.num_clients=2",
        "join_ratio=1.0", f"algorithm.name={algorithm}", "eval.count_flops=true",
    ])  # fmt: skip
    run = tmp_path / algorithm
    run_experiment(cfg, run, progress=False)
    with open(run / "clients.csv") as handle:
        flops = {int(r["client"]): float(r["flops"]) for r in csv.DictReader(handle)
                 if r["round"] == "0"}  # fmt: skip
    partition = json.loads((run / "partition.json").read_text())
    return flops, {c["client"]: c["train"] for c in partition["clients"]}


def test_extra_passes_are_counted_as_the_right_multiples(tmp_path) -> None:
    model = FedAvgCNN(in_channels=1, num_classes=10, image_size=28)
    x, y = torch.randn(1, 1, 28, 28), torch.randint(0, 10, (1,))
    _, per_sample = batch_flops(model, x, y)  # forward and backward of one sample
    features = conv(1, 32, 24, 5, 1) + conv(32, 64, 8, 5, 1) + linear(1024, 512, 1)
    fedavg, train = _client_flops(tmp_path, "fedavg")
    assert fedavg == {c: per_sample * n for c, n in train.items()}  # one epoch, every batch
    ditto, _ = _client_flops(tmp_path, "ditto")
    assert ditto == {c: 2 * f for c, f in fedavg.items()}  # + its personal pass, 1 epoch
    moon, _ = _client_flops(tmp_path, "moon")  # + the global and the previous features
    assert moon == {c: (per_sample + 2 * features) * n for c, n in train.items()}
    # FedRep: a head epoch (body frozen: a forward and the head's weight gradient), then a
    # body epoch (head frozen: all but the head's weight gradient): one forward more
    forward = features + linear(512, 10, 1)
    fedrep, _ = _client_flops(tmp_path, "fedrep")
    assert fedrep == {c: (per_sample + forward) * n for c, n in train.items()}
