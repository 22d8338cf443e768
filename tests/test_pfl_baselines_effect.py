"""The ten baselines on real data, each against FedAvg: every test fails if the algorithm were
replaced by FedAvg (the issue's effect tests). Hand computations: tests/test_pfl_baselines.py;
fidelity against PFLlib: benchmarks/results/personalization.md.

Personalized algorithms: pathological mnist-5k (2,000 of its real digits, 20 clients with 2
classes each, ~25 test digits a client), the narrow FedAvgCNN (``helpers.NARROW_CNN``), lr
0.05, batch 10, 1 local epoch, 2 rounds; accuracy is the PFLlib protocol's (each client's
personalized model on its own test split at the start of a round), best acc_weighted over
rounds 0-2 (pFedMe and FedBABU, the costly ones: rounds 0-1). Measured on this machine,
seeds 0 / 1 / 2: FedAvg 0.235 / 0.158 / 0.214; FedRep 0.710 / 0.621 / 0.654, LG-FedAvg 0.757
/ 0.830 / 0.818, FedRoD 0.846 / 0.842 / 0.741, APFL 0.633 / 0.826 / 0.711, pFedMe 0.732 /
0.791 / 0.766, Per-FedAvg 0.621 / 0.665 / 0.580, FedBABU (2 fine-tune epochs) 0.704 / 0.830
/ 0.751. The bar, 0.50 and 20 points above FedAvg, is asserted out of FedAvg's reach in the
same run (acc_weighted over 500 test digits: binomial std <= 2.3 points, so 20 points is ~9
std). On PFLlib's widths (until 2026-12) seed 0 gave FedAvg 0.46 and the seven
0.74-0.87 against a bar of 0.65: the narrow net learns slower in 2 rounds (FedAvg most), so
the bar moved to 0.50, 26-34 points above FedAvg's best (it was 19 above).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import pytest
import torch
from helpers import NARROW_CNN, untimed

from fedsim.config import load_config
from fedsim.data.datasets import ImageDataset
from fedsim.runtime.executor import LocalExecutor
from fedsim.simulation import RunResult, Simulation, build_data
from lightning_modules.base import FLModule

PATHOLOGICAL = [
    "seed=0",
    "rounds=2",
    "data.num_clients=20",
    "data.max_samples=2000",
    "data.partition.name=pathological",
    "data.partition.classes_per_client=2",
    "client.lr=0.05",
    *NARROW_CNN,
]
ACCURACY, MARGIN = 0.50, 0.20


def run(overrides: list[str], data_hook=None, keep_store: bool = False) -> RunResult:
    """One run of configs/quickstart.yaml with ``overrides`` on the local executor;
    ``data_hook(data)`` may change the federation before the simulation is built. The client
    state store is closed unless ``keep_store`` (then the caller closes it)."""
    torch.set_num_threads(1)
    cfg = load_config("configs/quickstart.yaml", ["runtime.executor=local", *overrides])
    data = build_data(cfg)
    if data_hook is not None:
        data = data_hook(data)
    simulation = Simulation(cfg, data)
    with LocalExecutor(simulation.worker_spec, simulation.data) as executor:
        result = simulation.run(executor)
    if not keep_store:
        result.client_store.close()
    return result


def best(result: RunResult) -> float:
    return float(result.summary["best"]["acc_weighted"])


# FedAvg on PATHOLOGICAL is the reference of this module, test_personalization_effect.py
# and test_fedavg_ft.py: one run per test process, and the three share the group GROUP,
# so one run per session.
GROUP = "test_pfl_baselines_effect"


@functools.cache
def fedavg_below_the_bar() -> float:
    """FedAvg's best on ``PATHOLOGICAL``, asserted well below the bar."""
    accuracy = best(run([*PATHOLOGICAL, "algorithm.name=fedavg"]))
    assert accuracy < ACCURACY - 0.05, (
        f"FedAvg {accuracy:.3f} nears the bar: the test proves nothing"
    )
    return accuracy


@pytest.fixture(scope="module")
def fedavg_pathological() -> float:
    return fedavg_below_the_bar()


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithm",
    [
        ["algorithm.name=fedrep"],
        ["algorithm.name=lgfedavg"],
        ["algorithm.name=fedrod"],
        ["algorithm.name=apfl"],
        ["algorithm.name=pfedme", "rounds=1"],  # K = 5 gradients a batch: one round is plenty
        ["algorithm.name=perfedavg"],
        ["algorithm.name=fedbabu", "algorithm.finetune_epochs=2", "rounds=1"],
    ],
    ids=lambda a: a[0].split("=")[1],
)
def test_personalized_beats_fedavg_on_pathological(fedavg_pathological, algorithm):
    accuracy = best(run([*PATHOLOGICAL, *algorithm]))
    assert accuracy >= ACCURACY and accuracy >= fedavg_pathological + MARGIN, (
        algorithm, accuracy, fedavg_pathological,
    )  # fmt: skip


# ------------------------------------------------------------------ FedBN: feature shift

FEATURE_SHIFT = [
    "seed=0",
    "rounds=2",
    "data.num_clients=10",
    "data.max_samples=2000",
    "data.partition.name=iid",
    "client.lr=0.01",
    "model.name=fedavg_cnn_bn",
]


def inverted_odd_clients(data):
    """Odd clients see their digits inverted (255 - x), train and test: two feature domains
    with the same labels, FedBN's setting (its paper: digits from different sources)."""
    ds = data.dataset
    images = ds.images.copy()
    for k, split in enumerate(data.clients):
        if k % 2 == 1:
            idx = np.concatenate([split.train, split.test])
            images[idx] = 255 - images[idx]
    shifted = ImageDataset(ds.name, images, ds.labels, ds.num_classes)
    return dataclasses.replace(data, dataset=shifted)


@pytest.mark.slow
def test_fedbn_beats_fedavg_across_feature_domains():
    """FedBN keeps each client's BatchNorm layers: evaluated with its own domain's statistics
    it beats FedAvg (whose averaged statistics fit neither domain) at every round. Measured
    at rounds 1-2, FedAvg / FedBN: seed 0 0.234, 0.542 / 0.354, 0.672; seed 1 0.238, 0.424 /
    0.380, 0.670; seed 2 0.318, 0.594 / 0.394, 0.690 (ahead by 7.6-25 points a round). A
    third round cost half as much again and narrowed the gap as FedAvg caught up: 0.658 /
    0.756, 0.600 / 0.784, 0.752 / 0.798 (seed 2's best, 4.6 points, under the 6 asserted).
    On label skew alone
    FedBN is FedAvg plus local statistics: PFLlib's own runs on pathological mnist-5k give
    88.1 % against 87.7 % (benchmarks/results/personalization.md). PFLlib's widths: with the
    narrow FedAvgCNNBN FedBN leads by only 2.4 / 3.2 / 3.2 points at round 1."""
    fedavg = run([*FEATURE_SHIFT, "algorithm.name=fedavg"], inverted_odd_clients)
    fedbn = run([*FEATURE_SHIFT, "algorithm.name=fedbn"], inverted_odd_clients, keep_store=True)
    for a, b in zip(fedavg.history[1:], fedbn.history[1:], strict=True):
        assert b["acc_weighted"] > a["acc_weighted"] + 0.04, (a, b)
    assert best(fedbn) >= best(fedavg) + 0.06, (best(fedbn), best(fedavg))
    # each client kept its own BatchNorm statistics: the two domains' differ
    plain, inverted = fedbn.client_store.get(0), fedbn.client_store.get(1)
    fedbn.client_store.close()
    assert not torch.allclose(plain["personal"], inverted["personal"], atol=1e-3)


# ------------------------------------------------------------------ MOON

MOON_RUN = [
    "seed=0",
    "rounds=2",
    "data.num_clients=6",
    "data.max_samples=600",
    "data.partition.name=dirichlet",
    "data.partition.alpha=0.3",
    "client.lr=0.05",
    *NARROW_CNN,  # the log 2 and the equality hold for any net
]


@pytest.mark.slow
def test_moon_contrastive_term_changes_the_loss_and_mu_zero_is_fedavg():
    """mu 0 is FedAvg to the bit. With mu 1, round 0 contrasts each model against two equal
    ones (global = previous = the received model): the term is log 2 per sample and its
    gradient vanishes, so the loss is FedAvg's plus log 2; from round 1 on the previous model
    differs and the term moves the model away from FedAvg's."""
    fedavg = run([*MOON_RUN, "algorithm.name=fedavg"])
    mu0 = run([*MOON_RUN, "algorithm.name=moon", "algorithm.mu=0"])
    assert untimed(mu0.history) == untimed(fedavg.history)
    assert torch.equal(mu0.state["params"], fedavg.state["params"])

    moon = run([*MOON_RUN, "algorithm.name=moon", "algorithm.mu=1"])
    gap = moon.history[0]["train_loss"] - fedavg.history[0]["train_loss"]
    assert gap == pytest.approx(math.log(2), abs=2e-3)
    assert (moon.state["params"] - fedavg.state["params"]).abs().max() > 1e-3
    assert moon.history[1]["train_loss"] != pytest.approx(
        fedavg.history[1]["train_loss"] + math.log(2), abs=2e-3
    )


# ------------------------------------------------------------------ FedNova


class SoftmaxRegression(FLModule):
    """A linear model (convex loss): the setting of FedNova's consistency analysis."""

    block_names = ("fc",)

    def __init__(self, in_channels=1, num_classes=10, image_size=28, lr=0.005, momentum=0.0,
                 weight_decay=0.0):  # fmt: skip
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        self.fc = torch.nn.Linear(in_channels * image_size * image_size, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(x, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


UNEQUAL_WORK = [
    "rounds=30",
    "data.num_clients=10",
    "data.max_samples=2000",
    "data.partition.name=pathological",
    "data.partition.classes_per_client=5",  # even clients: digits 0-4; odd: 5-9
    "client.epochs_by_client=[4,1]",  # even clients do 4 epochs, odd ones 1
    "client.lr=0.003",
    f"model.name={__name__}:SoftmaxRegression",
]


def equal_sizes(data):
    """Every client keeps 40 training and 13 test digits: local steps differ by epochs only."""
    clients = [dataclasses.replace(c, train=c.train[:40], test=c.test[:13]) for c in data.clients]
    return dataclasses.replace(data, clients=clients)


def group_losses(result: RunResult, seed: int) -> tuple[float, float]:
    """Test loss of the final global model on the even (4-epoch) and odd (1-epoch) clients."""
    cfg = load_config("configs/quickstart.yaml", [*UNEQUAL_WORK, f"seed={seed}"])
    data = equal_sizes(build_data(cfg))
    model = SoftmaxRegression()
    torch.nn.utils.vector_to_parameters(result.state["params"], model.parameters())
    out = []
    for parity in (0, 1):
        idx = np.concatenate([c.test for k, c in enumerate(data.clients) if k % 2 == parity])
        x, y = data.dataset.batch(idx)
        with torch.no_grad():
            out.append(float(torch.nn.functional.cross_entropy(model(x), y)))
    return out[0], out[1]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_fednova_beats_fedavg_on_the_federated_objective_with_unequal_local_steps(seed):
    """Half the clients (digits 0-4) do 4x the local steps of the other half (5-9), on equal
    data. FedAvg then minimizes sum_k p_k tau_k F_k: its model serves the busy half and
    neglects the other; FedNova's normalized averaging minimizes sum_k p_k F_k, the
    federated objective. Measured after 30 rounds (global test loss): seed 0 FedAvg 0.944,
    FedNova 0.844; seed 1 0.611, 0.551; seed 2 0.818, 0.707 (busy / other half, seed 0:
    FedAvg 0.43 / 1.34, FedNova 0.90 / 0.62 on the training data). A convex model keeps
    the local updates in the regime of the paper's analysis; with the CNN and pathological
    2-class clients, FedNova's extrapolation of short local runs to tau_eff steps can cost
    more than the inconsistency (PFLlib-fidelity rows in benchmarks/results/personalization.md)."""
    runs = {}
    for name in ("fedavg", "fednova"):
        runs[name] = run([*UNEQUAL_WORK, f"seed={seed}", f"algorithm.name={name}"], equal_sizes)
    fedavg, fednova = (runs[n].history[-1]["loss"] for n in ("fedavg", "fednova"))
    assert fednova <= 0.95 * fedavg, (fednova, fedavg)
    busy, other = group_losses(runs["fedavg"], seed)
    nova_busy, nova_other = group_losses(runs["fednova"], seed)
    assert other - busy > 2 * abs(nova_other - nova_busy), (busy, other, nova_busy, nova_other)
