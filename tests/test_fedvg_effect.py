"""FedVG against FedAvg on real data, where FedVG's premise holds.

Issue 6 asks for FedVG above FedAvg on Dirichlet label skew; at this project's scale it is
not (benchmarks/results/fedvg.md, 3 seeds at Dir(0.05) and Dir(0.1)), so no test asserts
that. FedVG's premise is narrower: some client models generalize worse than their sample
counts say, and gradients on a server validation set can see which. Here that is made true
with real data: mnist-5k IID over 10 clients, 4 of which have every training label shifted
by one (y -> y + 1 mod 10, a systematic label flip; their test labels stay true). Same data,
seed, rounds and local training for both; FedAvg trains on FedVG's split (val_holdout).

Measured on this machine on the narrow FedAvgCNN (tests/helpers.py NARROW_CNN; 6 rounds,
lr 0.1, batch 10, 1 epoch; FedVG scores each client on 128 of the ~375 held-out samples,
``val_samples``), seeds 0 / 1 / 2, mean accuracy of the last 3 rounds: FedAvg 80.6 / 76.9 /
83.9, FedVG 92.9 / 93.9 / 92.7; the flipped clients' share of FedVG's weight is ~0.3-0.43 in
round 0 (a random model scores every client alike), at most 0.18 / 0.21 / 0.20 from round 1
on, and 0.12 / 0.15 / 0.12 over the last 3 rounds. At lr 0.05 the narrow net still gave the
flipped clients 0.50 / 0.36 / 0.46 in round 1 (PFLlib's widths at lr 0.05: FedAvg 81.6 /
76.8 / 83.5, FedVG 91.3 / 91.1 / 92.7, last-3 share 0.13 / 0.16 / 0.12). Scoring on all ~375
cost FedVG twice FedAvg's CPU (a validation gradient per client costs about its training)
for the same picture; on 5 rounds the last-3 share reached 0.19 (seed 1), on 3,000 digits
0.23-0.27 (every seed; both with PFLlib's widths): too close to, or past, the bound. With
the flipped clients' held-out shares left flipped too (a validation set 40 % wrong; seed 0),
their share stayed 0.34-0.40 and FedVG led by ~3.5 points only: FedVG is as good as its
validation set.

Asserted, seed 0: from round 1 on, FedVG gives the flipped clients less than their sample
share of the weight (FedAvg gives them exactly that), and less than half of it over the last
3 rounds; its mean accuracy over the last 3 rounds is at least 2 points above FedAvg's
(~1,250 test samples: binomial std <= 1.2 points per round, ~0.7 for a 3-round mean).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import NARROW_CNN

from fedsim.algorithms.aggregation_weights import WeightingParams
from fedsim.algorithms.fedvg import build_validation
from fedsim.config import load_config
from fedsim.data.build import build_federated_data
from fedsim.data.datasets import ImageDataset
from fedsim.data.federated import FederatedData
from fedsim.runtime.executor import LocalExecutor
from fedsim.simulation import Simulation, cached_dataset
from fedsim.tracking.base import MemorySink

CLIENTS, FLIPPED, ROUNDS = 10, (0, 1, 2, 3), 6
VAL_SAMPLES = 128  # 4 batches of 32: a third of the held-out pool, the scores as sharp
MARGIN = 0.02


def flipped_data(seed: int) -> FederatedData:
    """mnist-5k IID over CLIENTS clients; FLIPPED clients' training labels shifted by one,
    except the share they hold out for the server's validation set (which stays clean)."""
    digits = cached_dataset("mnist-5k", "data", False)
    data = build_federated_data(digits, CLIENTS, "iid", seed=seed)
    _, split = build_validation(WeightingParams(), data, lambda name: digits, seed)  # no loads
    labels = digits.labels.copy()  # the cached dataset stays untouched
    for client in FLIPPED:
        train = split.train_subsets[client]
        labels[train] = (labels[train] + 1) % 10
    flipped = ImageDataset(digits.name, digits.images, labels, digits.num_classes)
    return FederatedData(flipped, data.clients, data.partition)


def run(weighting: str) -> tuple[list[float], list[float]]:
    """Accuracy per round, and the flipped clients' share of the aggregate per training round."""
    cfg = load_config(
        "configs/quickstart.yaml",
        [
            "seed=0",
            f"rounds={ROUNDS}",
            f"data.num_clients={CLIENTS}",
            "algorithm.name=fedvg",
            f"algorithm.weighting={weighting}",
            "algorithm.val_holdout=true",
            "runtime.executor=local",
            "client.lr=0.1",  # the narrow net at lr 0.05 separates the clients a round later
            *NARROW_CNN,
            # the server's pool only (FedAvg holds out the same samples and does not score)
            *([f"algorithm.val_samples={VAL_SAMPLES}"] if weighting == "fedvg" else []),
        ],
    )
    sim = Simulation(cfg, data=flipped_data(0))
    sink = MemorySink()
    result = sim.run(LocalExecutor(sim.worker_spec, sim.data), [sink])
    shares = [
        sum(c.weight for c in record.clients if c.client in FLIPPED)
        for record in sink.records[:ROUNDS]  # the last record only evaluates
    ]
    return [h["acc_weighted"] for h in result.history], shares


@pytest.mark.slow
def test_fedvg_downweights_label_flipped_clients_and_beats_fedavg():
    fedavg_acc, fedavg_shares = run("samples")
    fedvg_acc, fedvg_shares = run("fedvg")
    sample_share = len(FLIPPED) / CLIENTS  # IID: equal clients
    assert len(fedvg_shares) == ROUNDS
    assert fedavg_shares == pytest.approx([sample_share] * ROUNDS, abs=0.01)
    assert max(fedvg_shares[1:]) < sample_share, fedvg_shares
    assert np.mean(fedvg_shares[-3:]) < sample_share / 2, fedvg_shares
    fedavg_late, fedvg_late = np.mean(fedavg_acc[-3:]), np.mean(fedvg_acc[-3:])
    assert fedvg_late >= fedavg_late + MARGIN, (fedvg_acc, fedavg_acc)
