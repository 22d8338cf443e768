"""Values that change over rounds (``fedsim/schedules.py``): each kind against a hand
computation, the config's one-line refusals, and runs where a decaying, a warmed-up and a
metric-adapted value reach the clients and the server, show in metrics.jsonl, resume exactly
and come to a worker holding its own copy of the algorithm (as a Ray actor does) with each
round's tasks."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from helpers import NARROW_CNN, untimed

from fedsim.config import config_from_dict, load_config
from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment
from fedsim.run_plan import ScheduledValues
from fedsim.runtime.executor import LocalExecutor
from fedsim.schedules import Adapting, parse_schedule
from fedsim.search.space import with_values
from fedsim.simulation import Simulation

SMALL = [
    "data.name=mnist-5k", "data.max_samples=600", "data.num_clients=4", "join_ratio=1",
    "rounds=3", "runtime.executor=local", "runtime.device=cpu", "client.lr=0.05",
    "algorithm.name=fedprox", *NARROW_CNN,  # the narrow FedAvgCNN: values, not the net
]  # fmt: skip
DECAYING_MU = "algorithm.mu={schedule: exponential, initial: 0.1, decay: 0.5}"
WARMED_SERVER_LR = "algorithm.server_lr={schedule: warmup, initial: 1.0, rounds: 2, start: 0.5}"
ADAPTIVE_MU = "algorithm.mu={schedule: adaptive, initial: 0.5, step: 0.2}"


def values(kind: str, run: int = 6, integer: bool = False, **settings) -> list[float]:
    """The schedule's value in each round of a ``run``-round run."""
    schedule = parse_schedule("algorithm.x", {"schedule": kind, **settings}, integer)
    return [schedule.at(r, run) for r in range(run)]


def test_each_kind_gives_the_values_computed_by_hand():
    assert values("step", initial=1.0, factor=0.5, every=2) == [1, 1, 0.5, 0.5, 0.25, 0.25]
    assert values("exponential", 3, initial=0.2, decay=0.5) == [0.2, 0.1, 0.05]
    cosine = values("cosine", 4, initial=1.0, final=0.2)  # to final over the run's 4 rounds
    want = [0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * r / 4)) for r in range(4)]
    assert cosine == pytest.approx(want) and cosine[0] == 1.0
    assert values("cosine", 3, initial=1.0, rounds=2) == pytest.approx([1.0, 0.5, 0.0])
    assert values("warmup", 4, initial=1.0, rounds=2, start=0.5) == [0.75, 1.0, 1.0, 1.0]
    assert values("piecewise", 5, values={0: 0.1, 2: 0.01, 4: 0.0}) == [0.1, 0.1, 0.01, 0.01, 0]
    grows = values("piecewise", 4, integer=True, values=[[0, 1], [2, 3]])
    assert grows == [1, 1, 3, 3]  # a personal-epoch count that grows
    assert values("warmup", 3, integer=True, initial=4, rounds=3) == [1.0, 3.0, 4.0]  # 4/3, 8/3


def test_adaptive_value_follows_the_metric_as_pfl_research_does():
    # FedProx appendix C.3.3 / pfl-research: down by step once the loss fell `patience` times
    # in a row, up by step whenever it did not fall; within [low, high]
    schedule = parse_schedule("algorithm.mu", {
        "schedule": "adaptive", "initial": 0.5, "step": 0.2, "patience": 2, "high": 0.8,
    })  # fmt: skip
    mu = Adapting(schedule)
    seen = []
    for r, loss in enumerate([2.0, 1.5, 1.0, 1.2, 1.1, 1.3, 1.4]):
        mu.observe(r, {"train_loss": loss})
        seen.append(round(mu.value, 10))
    # fell (1 in a row) | fell (2: down) | fell (3: down) | rose: up | fell (1) | rose | rose (cap)
    assert seen == [0.5, 0.3, 0.1, 0.3, 0.3, 0.5, 0.7]
    mu.observe(7, {})  # a round without the metric (an evaluation-only round) moves nothing
    assert round(mu.value, 10) == 0.7


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.mu={schedule: sigmoid}", r"algorithm\.mu\.schedule='sigmoid': allowed: step,"),
        ("algorithm.mu={schedule: step, initial: 0.1}", r"algorithm\.mu\.factor=null: required"),
        ("algorithm.mu={schedule: exponential, initial: 0.1, decay: 0.9, every: 2}",
         r"algorithm\.mu\.every=2: unknown key of a exponential schedule"),
        ("algorithm.weighting={schedule: step}",
         r"algorithm\.weighting=.*takes a number, not a schedule.*\(keys here that take a "
         r"schedule: .*server_lr.*mu\)"),
        ("algorithm.mu={schedule: step, initial: 0.1, factor: -1, every: 1}",
         r"algorithm\.mu=.*round 1 gives -0\.1, which must be >= 0"),
        ("client.epochs={schedule: step, initial: 2, factor: 2, every: 1}",
         r"client\.epochs=.*takes a number, not a schedule"),
        ("algorithm.mu={schedule: piecewise, values: {1: 0.1}}",
         r"algorithm\.mu\.values=.*must give round 0's value"),
    ],
)
def test_a_bad_schedule_is_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config(None, [*SMALL, "algorithm.mu=0.01", override])
    assert "\n" not in str(err.value)


def test_schedules_that_cannot_act_are_refused():
    lr = "client.lr={schedule: exponential, initial: 0.1, decay: 0.9}"
    with pytest.raises(ConfigError, match=r"client\.lr_schedule='cosine': client\.lr is given"):
        load_config(None, [*SMALL, "algorithm.mu=0.1", lr, "client.lr_schedule=cosine"])
    momentum = "client.momentum={schedule: piecewise, values: {0: 0.0, 2: 0.9}}"
    with pytest.raises(ConfigError, match=r"client\.momentum=.*only with client\.optimizer=sgd"):
        load_config(None, [*SMALL, "algorithm.mu=0.1", momentum, "client.optimizer=adam"])


def test_a_schedule_round_trips_through_config_yaml_and_is_searchable():
    cfg = load_config(None, [*SMALL, DECAYING_MU])
    raw = cfg.to_dict()
    assert raw["algorithm"]["mu"] == {"schedule": "exponential", "initial": 0.1, "decay": 0.5}
    assert config_from_dict(raw).schedules == cfg.schedules and cfg.algorithm.params.mu == 0.1
    # a Tune search sets one setting of the schedule (fedsim tune --search 'algorithm.mu.decay=...')
    searched = config_from_dict(with_values(raw, {"algorithm.mu.decay": 0.8}))
    assert searched.schedules["algorithm.mu"].settings["decay"] == 0.8


def test_a_constant_schedule_is_the_number_to_the_bit(tmp_path):
    plain = run_experiment(load_config(None, [*SMALL, "algorithm.mu=0.1", "rounds=2"]),
                           tmp_path / "a", progress=False, report=False)  # fmt: skip
    piecewise = "algorithm.mu={schedule: piecewise, values: {0: 0.1}}"
    scheduled = run_experiment(load_config(None, [*SMALL, piecewise, "rounds=2"]),
                               tmp_path / "b", progress=False, report=False)  # fmt: skip
    assert torch.equal(plain.state["params"], scheduled.state["params"])
    assert [h.get("acc_weighted") for h in plain.history] == [
        h.get("acc_weighted") for h in scheduled.history
    ]


def metrics(run_dir) -> list[dict]:
    return untimed([json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()])


@pytest.mark.parametrize("schedule", [f"{DECAYING_MU}|{WARMED_SERVER_LR}", ADAPTIVE_MU])
def test_scheduled_values_show_in_the_metrics_and_resume_exactly(tmp_path, schedule):
    given = [*SMALL, *schedule.split("|"), "checkpoint_every=1"]
    straight = run_experiment(load_config(None, given), tmp_path / "straight",
                              progress=False, report=False)  # fmt: skip
    run_experiment(load_config(None, [*given, "rounds=2"]), tmp_path / "resumed",
                   progress=False, report=False)  # fmt: skip
    resumed = run_experiment(load_config(None, given), tmp_path / "resumed",
                             progress=False, report=False, resume=True)  # fmt: skip
    assert torch.equal(straight.state["params"], resumed.state["params"])
    assert metrics(tmp_path / "resumed") == metrics(tmp_path / "straight")
    mu = [m["algorithm.mu"] for m in metrics(tmp_path / "straight")[:3]]
    if "adaptive" in schedule:  # down 0.2 after each round whose train loss fell
        losses = [m["train_loss"] for m in metrics(tmp_path / "straight")[:3]]
        assert losses[1] < losses[0]
        assert mu[:2] == [0.5, pytest.approx(0.3)]
    else:
        assert mu == [0.1, 0.05, 0.025]
        lrs = [m["algorithm.server_lr"] for m in metrics(tmp_path / "straight")[:3]]
        assert lrs == [0.75, 1.0, 1.0]


def test_a_worker_with_its_own_copy_of_the_algorithm_gets_the_rounds_values():
    """A Ray actor unpickles the algorithm once: the values must come with each round."""
    cfg = load_config(None, [*SMALL, DECAYING_MU, WARMED_SERVER_LR, "rounds=2"])
    shared = Simulation(cfg)
    own = Simulation(cfg)
    apart = LocalExecutor(copy.deepcopy(own.worker_spec), own.data)  # the worker's own copy
    assert apart.worker.algorithm is not own.algorithm
    with LocalExecutor(shared.worker_spec, shared.data) as executor:
        a = shared.run(executor)
    with apart:
        b = own.run(apart)
    assert torch.equal(a.state["params"], b.state["params"])
    # each round's value came with its tasks: the worker's copy still holds round 0's
    assert apart.worker.algorithm.params.mu == 0.1 == own.algorithm.params.mu


def test_the_decayed_value_is_not_a_constant_in_disguise():
    cfg = load_config(None, [*SMALL, DECAYING_MU])
    plan = Simulation(cfg).plan
    plan_values = ScheduledValues(cfg.schedules, plan.lr, cfg.rounds, cfg.algorithm.params)
    assert [plan_values.at(r).algorithm_params.mu for r in range(3)] == [0.1, 0.05, 0.025]
