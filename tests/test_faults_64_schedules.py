"""Issue 64, values over rounds: overflow, integer keys, infinite rounds, adaptive metrics."""

from __future__ import annotations

import json

import pytest

from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment
from fedsim.schedules import parse_schedule

SMALL = [
    "data.name=mnist-5k", "data.max_samples=600", "data.num_clients=4", "join_ratio=1",
    "rounds=20", "runtime.executor=local", "runtime.device=cpu",
]  # fmt: skip


def refused(*overrides: str) -> str:
    """The one line a config with ``overrides`` is refused with."""
    with pytest.raises(ConfigError) as err:
        load_config(None, [*SMALL, *overrides])
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(
    ("schedule", "round_"),
    [
        ("{schedule: exponential, initial: 0.1, decay: 1e200}", 2),  # 1e400: OverflowError
        ("{schedule: exponential, initial: 1e300, decay: 10}", 9),  # 1e309: inf, no error
        ("{schedule: step, initial: 1.0, factor: 1e300, every: 3}", 6),
    ],
)
def test_a_value_past_floats_range_is_one_line_naming_its_round(schedule, round_):
    line = refused("algorithm.name=fedprox", f"algorithm.mu={schedule}")
    assert line.startswith("algorithm.mu=") and f"round {round_} gives inf" in line


def test_an_overflowing_schedule_gives_inf_not_an_exception():
    mu = parse_schedule("algorithm.mu", {"schedule": "exponential", "initial": 0.1, "decay": 1e200})
    assert mu.at(1, 5) == 0.1 * 1e200 and mu.at(2, 5) == float("inf")
    k = parse_schedule("algorithm.K", {"schedule": "step", "initial": 2, "factor": 1e300,
                                      "every": 1}, integer=True)  # fmt: skip
    assert k.at(2, 5) == float("inf")  # an integer key's rounding leaves inf to the check


@pytest.mark.parametrize(
    ("algorithm", "key"),
    [("pfedme", "K"), ("fedavg_ft", "finetune_epochs"), ("ditto", "personal_epochs")],
)
def test_an_integer_key_takes_a_schedule_of_integers(algorithm, key):
    grows = f"algorithm.{key}={{schedule: piecewise, values: {{0: 2, 2: 3}}}}"
    cfg = load_config(None, [*SMALL, f"algorithm.name={algorithm}", grows])
    schedule = cfg.schedules[f"algorithm.{key}"]
    values = [schedule.at(r, 20) for r in range(4)]
    assert values == [2, 2, 3, 3] and all(type(v) is int for v in values)  # range(K) reads it
    assert getattr(cfg.algorithm.params, key) == 2


def test_a_run_with_an_integer_schedule_trains_with_each_rounds_count(tmp_path):
    grows = "algorithm.K={schedule: piecewise, values: {0: 2, 2: 3}}"
    small = ["data.max_samples=300", "data.num_clients=3", "rounds=3", "runtime.device=cpu"]
    cfg = load_config("configs/quickstart.yaml", [*small, "algorithm.name=pfedme", grows])
    run_experiment(cfg, tmp_path / "run", progress=False)  # range(2.0) raised in round 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed"
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line).get("algorithm.K") for line in lines[:3]] == [2, 2, 3]


def test_an_integer_schedule_that_rounds_to_zero_names_the_round_and_value():
    decays = "algorithm.K={schedule: exponential, initial: 2, decay: 0.1}"
    line = refused("algorithm.name=pfedme", decays)
    assert "round 1 gives 0, which must be an integer >= 1" in line


def test_an_adaptive_schedule_on_a_metric_no_round_reports_is_refused():
    adaptive = "algorithm.mu={schedule: adaptive, initial: 0.1, metric: nosuch_metric}"
    line = refused("algorithm.name=fedprox", adaptive)
    assert line.startswith("algorithm.mu.metric='nosuch_metric': no round reports it")
    assert "train_loss" in line and "acc_weighted" in line
    line = refused("algorithm.name=fedprox",
                   "algorithm.mu={schedule: adaptive, initial: 0.1, metric: val/loss}")  # fmt: skip
    assert "eval.validation_ratio" in line


@pytest.mark.parametrize(
    ("metric", "extra"),
    [
        ("loss", []),
        ("train/my_value", []),
        ("val/loss", ["eval.validation_ratio=0.2"]),
        ("unseen/acc_weighted", ["eval.holdout_clients=1"]),
        ("algorithm.mu", []),
    ],
)
def test_an_adaptive_schedule_on_a_reported_metric_is_accepted(metric, extra):
    adaptive = f"algorithm.mu={{schedule: adaptive, initial: 0.1, metric: {metric}}}"
    cfg = load_config(None, [*SMALL, "algorithm.name=fedprox", *extra, adaptive])
    assert cfg.schedules["algorithm.mu"].settings["metric"] == metric
