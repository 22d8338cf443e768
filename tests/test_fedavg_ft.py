"""FedAvg-FT (``fedsim/algorithms/fedavg_ft.py``): the fine-tune against a hand computation
on a quadratic probe, FedAvg's training and server left as they are, and the effect the
benchmarks use it for, on the personalization baselines' protocol (tests/test_pfl_baselines_
effect.py: pathological mnist-5k, 20 clients, 2 rounds), against FedAvg in the same run.

Measured on the narrow FedAvgCNN, best acc_weighted over rounds 0-2, seeds 0 / 1 / 2: FedAvg
0.235 / 0.158 / 0.214, FedAvg-FT 0.665 / 0.767 / 0.671 (the bar: 0.50 and 20 points above
FedAvg; on PFLlib's widths, bar 0.65: FedAvg 0.456 / 0.436 / 0.422, FedAvg-FT 0.807 / 0.807
/ 0.818).

This module and the algorithm's two files are everything the algorithm added (with its docs
section and CHANGELOG line): the contract, the feature pairs, the key checks and the docs'
tables find it by itself (docs/architecture.md, "Adding an algorithm").
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import client_info, federation
from test_newcomers_personal_model import LR, QuadraticProbe
from test_pfl_baselines_effect import (
    ACCURACY,
    GROUP,
    MARGIN,
    PATHOLOGICAL,
    best,
    fedavg_below_the_bar,
    run,
)

from fedsim.algorithm_params import example
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.fedavg_ft import FedAvgFT
from fedsim.streams import FEDBABU_FINETUNE_KEY


def fedavg_ft(epochs: int = 1) -> FedAvgFT:
    return FedAvgFT(FedAvgFT.Params(finetune_epochs=epochs), federation([("w", (1,))], [4, 4]))


def test_an_evaluated_client_is_tested_on_the_global_model_fine_tuned_by_hand():
    algo = fedavg_ft(epochs=2)
    probe = QuadraticProbe(algo.federation)  # batches [0, 1] (c 0.5) and [2, 3] (c 2.5)
    w = torch.tensor([1.0])
    plan = algo.client_start({"params": w}, {}, None, client_info(algo.federation, 0, 0, probe))
    x = 1.0
    for c in (0.5, 2.5, 0.5, 2.5):  # two epochs of SGD on 0.5 (x - c)^2
        x -= LR * (x - c)
    assert plan.eval_params.item() == pytest.approx(x)
    assert torch.equal(plan.train_params, w) and torch.equal(w, torch.tensor([1.0]))
    assert probe.train_calls[0]["epochs"] == 2 and probe.train_calls[0]["key"] == (
        FEDBABU_FINETUNE_KEY
    )
    # training and its upload are FedAvg's: the same plan and sums from the same model
    fedavg = FedAvg(FedAvg.Params(), algo.federation)
    info = client_info(algo.federation, 0, 0, None)
    base = fedavg.client_start({"params": w}, {}, None, info)
    assert base.train_indices is None and plan.train_indices is None
    trained = torch.tensor([0.25])
    ours = algo.client_finish(plan, trained, None, info).sums
    theirs = fedavg.client_finish(base, trained, None, info).sums
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k][1], theirs[k][1]) and ours[k][0] == theirs[k][0] for k in ours)


def test_no_fine_tune_when_not_evaluated_or_zero_epochs():
    probe = QuadraticProbe(fedavg_ft().federation)
    info = dataclasses.replace(client_info(fedavg_ft().federation, 0, 0, probe), evaluates=False)
    assert fedavg_ft().client_start({"params": torch.ones(1)}, {}, None, info).eval_params is None
    zero = fedavg_ft(epochs=0)
    plan = zero.client_start({"params": torch.ones(1)}, {}, None, client_info(zero.federation, 0))
    assert plan.eval_params is None and not probe.train_calls  # FedAvg's global model


def test_a_diverged_fine_tune_falls_back_to_the_global_model():
    algo = fedavg_ft()
    probe = QuadraticProbe(algo.federation, diverge=True)
    plan = algo.client_start({"params": torch.ones(1)}, {}, None,
                             client_info(algo.federation, 0, 0, probe))  # fmt: skip
    assert plan.eval_params is None


@pytest.mark.slow
@pytest.mark.xdist_group(GROUP)  # FedAvg's run is that module's (one per session)
def test_fine_tuning_beats_fedavg_on_pathological_non_iid():
    assert example("fedavg_ft") == []  # runs from a default config, nothing else needed
    fedavg = fedavg_below_the_bar()
    tuned = best(run([*PATHOLOGICAL, "algorithm.name=fedavg_ft"]))
    assert tuned >= ACCURACY and tuned >= fedavg + MARGIN, (tuned, fedavg)
