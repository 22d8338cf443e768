"""A round is one frozen value (issue 63): the run plan resolves each round's
``RoundContext``; the driver's algorithm and every client task receive it as an argument, and
nothing of a round is set on an object that outlives it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from helpers import client_info, federation, reduce_updates

from fedsim.algorithms.base import ClientPlan
from fedsim.algorithms.fedavgm import FedAvgM
from fedsim.algorithms.fedprox import FedProx
from fedsim.config import load_config
from fedsim.round_context import RoundContext
from fedsim.run_plan import LearningRate, ScheduledValues

REPO = Path(__file__).resolve().parents[1]
PARAMS = [("a", (2,)), ("b", (2,))]
SIZES = [10, 30]
DECAYING_MU = "algorithm.mu={schedule: exponential, initial: 0.1, decay: 0.5}"


def plan_values(*overrides: str) -> tuple[ScheduledValues, object]:
    cfg = load_config(None, ["rounds=3", *overrides])
    lr = LearningRate.from_config(cfg, cfg.client.lr)
    values = ScheduledValues(
        cfg.schedules, lr, cfg.rounds, cfg.algorithm.params, cfg.client.clip_grad_norm
    )
    return values, cfg.algorithm.params


def test_each_round_is_a_new_frozen_value_and_the_built_params_stay_round_0s():
    values, built = plan_values("algorithm.name=fedprox", DECAYING_MU)
    contexts = [values.at(r) for r in range(3)]
    assert [c.algorithm_params.mu for c in contexts] == [0.1, 0.05, 0.025]
    assert built.mu == 0.1  # nothing mutated the config's params
    assert [c.recorded["algorithm.mu"] for c in contexts] == [0.1, 0.05, 0.025]
    with pytest.raises(dataclasses.FrozenInstanceError):
        contexts[1].lr = 1.0  # type: ignore[misc]


def test_client_settings_of_a_round_are_in_its_context():
    values, _ = plan_values(
        "client.lr={schedule: step, initial: 0.1, factor: 0.5, every: 1}",
        "client.optimizer=sgd",
        "client.momentum={schedule: step, initial: 0.8, factor: 0.5, every: 1}",
        "client.clip_grad_norm={schedule: exponential, initial: 2.0, decay: 0.5}",
    )
    second = values.at(1)
    assert second.lr == pytest.approx(0.05) and second.lr_scale == pytest.approx(0.5)
    assert second.optimizer == {"momentum": 0.4}
    assert second.clip_grad_norm == 1.0
    assert second.recorded["lr"] == pytest.approx(0.05)


def test_an_integer_key_comes_as_an_int():
    values, _ = plan_values(
        "algorithm.name=ditto",
        "algorithm.personal_epochs={schedule: piecewise, values: {0: 1, 1: 2}}",
    )
    epochs = [values.at(r).algorithm_params.personal_epochs for r in range(3)]
    assert epochs == [1, 2, 2] and all(type(e) is int for e in epochs)  # range() takes it


def test_fedprox_reads_mu_from_the_clients_round_context():
    """The walk of ``algorithm.mu``: the plan, the round context, the use."""
    fed = federation(PARAMS, SIZES)
    algo = FedProx(FedProx.Params(mu=0.1), fed)
    broadcast = {"params": torch.zeros(4)}
    context = RoundContext(3, dataclasses.replace(algo.params, mu=0.025))
    info = dataclasses.replace(client_info(fed, 0, 3), context=context)
    assert algo.client_start(broadcast, {}, None, info).terms.mu == 0.025
    assert algo.params.mu == 0.1  # the algorithm object holds no round
    assert algo.client_start(broadcast, {}, None, client_info(fed, 0)).terms.mu == 0.1


def test_the_server_step_takes_the_rounds_server_lr():
    fed = federation(PARAMS, SIZES)
    algo = FedAvgM(FedAvgM.Params(server_momentum=0.0), fed)
    theta = torch.ones(4)
    models = [torch.tensor([1.0, 2, 3, 4]), torch.tensor([0.0, 0, 0, 8])]
    plan = ClientPlan(train_params=torch.zeros(4))
    updates = [algo.client_finish(plan, m, None, client_info(fed, c)) for c, m in enumerate(models)]
    mean = (10 * models[0] + 30 * models[1]) / 40
    half = RoundContext(0, dataclasses.replace(algo.params, server_lr=0.5))
    new = algo.aggregate(algo.init_state(theta), reduce_updates(updates, [0, 1]), {}, half)
    assert torch.allclose(new["params"], theta - 0.5 * (theta - mean))
    assert algo.params.server_lr == 1.0


def test_no_round_value_travels_by_mutation():
    sources = "".join(p.read_text() for p in (REPO / "fedsim").rglob("*.py"))
    assert "use_values" not in sources
    assert "round_values" not in sources and "ROUND_VALUES" not in sources
