"""The LightningModule contract: what configure_optimizers may return, schedulers stepped as
Lightning steps them, client.optimizer / lr_schedule / precision, self.log collected per
client, a plain LightningModule (no fedsim base) training on both executors, and the one
line for what fedsim cannot honour."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from helpers import NARROW_CNN, lent_ray_executor, quickstart, untimed
from torch import nn

from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment
from fedsim.runtime.executor import LocalExecutor
from fedsim.runtime.lightning_steps import resolve_optimizers, step_schedulers
from fedsim.simulation import Simulation

PLAIN = "fedsim_plugins.lightning_plain:PlainNet"
# the quickstart sets client.lr for the built-in CNN; a module with its own optimizer owns it
OWN = (f"model.name={PLAIN}", "client.lr=null")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(autouse=True)
def examples_on_path(monkeypatch):
    """What ``PYTHONPATH=examples`` does for a user (the example package is not installed)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))


TINY = ["data.num_clients=4", "data.max_samples=400", "rounds=2"]


class Returns(pl.LightningModule):
    """configure_optimizers returns whatever ``kind`` says (for resolve_optimizers)."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind, self.layer = kind, nn.Linear(2, 2)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return {
            "optimizer": opt,
            "list": [opt],
            "tuple": ([opt], [sched]),
            "dict": {
                "optimizer": opt,
                "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 2},
            },  # fmt: skip
            "two": [opt, torch.optim.SGD(self.parameters(), lr=1.0)],
            "plateau": {
                "optimizer": opt,
                "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt),
            },
            "none": None,
        }[self.kind]


@pytest.mark.parametrize("kind", ["optimizer", "list", "tuple", "dict"])
def test_every_form_lightning_allows(kind):
    optimizer, schedules = resolve_optimizers(Returns(kind))
    assert isinstance(optimizer, torch.optim.SGD)
    assert len(schedules) == (kind in ("tuple", "dict"))
    if kind == "dict":  # interval step, frequency 2: stepped after steps 2 and 4
        for step in range(1, 5):
            optimizer.step()  # as in training (PyTorch warns of a scheduler stepped first)
            step_schedulers(schedules, "step", step)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("kind", "needle"),
    [("two", "returns 2 optimizers"), ("plateau", "ReduceLROnPlateau"), ("none", "NoneType")],
)
def test_what_a_local_loop_cannot_honour_is_one_line(kind, needle):
    with pytest.raises(ConfigError, match=needle):
        resolve_optimizers(Returns(kind))


def run(tmp_path: Path, *overrides: str, name: str = "run"):
    torch.set_num_threads(1)
    cfg = quickstart(*TINY, *overrides)
    return run_experiment(cfg, tmp_path / name, progress=False, report=False)


def test_plain_lightning_module_trains_with_its_adam_and_steplr(tmp_path):
    """Adam at 1e-3 halved every epoch (StepLR): with 2 local epochs the logged lr is the
    mean of 1e-3 and 5e-4 for every client, every round (state per client and per round)."""
    result = run(tmp_path, *OWN, "client.epochs=2")
    for row in result.history[:2]:
        assert row["train/lr"] == pytest.approx(0.75e-3)
        assert math.isfinite(row["train/loss"])
    assert result.history[-1]["acc_weighted"] > 0.3
    with open(tmp_path / "run" / "clients.csv") as file:
        rows = list(csv.DictReader(file))
    assert "train/loss" in rows[0] and float(rows[0]["train/lr"]) == pytest.approx(0.75e-3)


def test_plain_module_derives_its_blocks_for_fedper(tmp_path):
    sim = Simulation(quickstart(*TINY, *OWN, "algorithm.name=fedper"))
    assert sim.federation.block_names == ["features", "classifier"]
    assert sim.federation.head_names == ["classifier.weight", "classifier.bias"]
    start = sim.initial_params.clone()
    result = sim.run(LocalExecutor(sim.worker_spec, sim.data))
    for a, b in sim.algorithm.personal_ranges[1]:  # the server never averages the classifier
        assert torch.equal(result.state["params"][a:b], start[a:b])


@pytest.mark.slow
def test_plain_module_on_the_ray_pool_equals_the_local_executor(ray_pool):
    """On the session's lent worker actors (two, half a CPU each), which carry the example
    package the module is in (conftest ``ray_pool``); shipping it to actors started without
    it: tests/test_plugins.py."""
    torch.set_num_threads(1)
    cfg = quickstart(*TINY, *OWN, "client.epochs=2")
    local_sim = Simulation(cfg)
    local = local_sim.run(LocalExecutor(local_sim.worker_spec, local_sim.data))
    sim = Simulation(cfg)
    with lent_ray_executor(sim, ray_pool) as pool:
        on_ray = sim.run(pool)
    assert untimed(on_ray.history) == untimed(local.history)


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ([f"model.name={PLAIN}"],
         "client.lr=0.05: PlainNet defines its own configure_optimizers, which fedsim uses as "
         "it is: remove client.lr \\(or set it to null\\) and set lr in its "
         "configure_optimizers, or pass it to its constructor with model.args.lr"),
        ([*OWN, "client.optimizer=adamw"],
         "client.optimizer='adamw': PlainNet defines its own configure_optimizers"),
        ([*OWN, "client.momentum=0.9"], "client.momentum=0.9: PlainNet defines its own"),
        ([*OWN, "model.args.lr=0.1"], "model.args.lr=0.1: PlainNet's constructor takes no lr"),
        (["client.precision=bf16-mixed", "runtime.device=cpu"], "client.precision='bf16-mixed'"),
        (["client.betas=[0.5,0.9]"], "acts only with client.optimizer=adam|adamw"),
        (["client.lr_decay=0.9"], "acts only with client.lr_schedule=exponential"),
    ],
)  # fmt: skip
def test_what_fedsim_cannot_honour_is_refused_when_built(overrides, needle):
    with pytest.raises(ConfigError, match=needle):
        Simulation(quickstart(*TINY, *overrides))


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_client_optimizer_on_built_in_models(optimizer, tmp_path):
    """PFLlib's FedAvgCNN, seeds 0/1/2 (measured): Adam 0.71/0.58/0.71 vs SGD 0.07/0.08/0.09.
    Not the narrow one: Adam's ~lr steps move its 4x narrower layers less in 2 rounds
    (0.34/0.35/0.52; at lr 2e-3 or 3e-3, 0.49 to 0.66), for ~1 CPU-s saved."""
    adam = run(tmp_path, f"client.optimizer={optimizer}", "client.lr=0.001", name=optimizer)
    sgd = run(tmp_path, "client.lr=0.001", name="sgd")
    assert adam.history[-1]["acc_weighted"] != sgd.history[-1]["acc_weighted"]
    assert adam.history[-1]["acc_weighted"] > 0.5  # Adam at 1e-3 learns fast on mnist-5k


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        (["client.lr_schedule=exponential", "client.lr_decay=0.5"], [0.05, 0.025, 0.0125]),
        (["client.lr_schedule=cosine"], [0.05, 0.05 * 0.75, 0.05 * 0.25]),
    ],
)
def test_lr_schedule_is_applied_per_round_and_recorded(schedule, expected, tmp_path, capsys):
    """The old keys are read as a schedule on client.lr (one deprecation line on stderr)."""
    logged = run(tmp_path, "client.lr=0.05", "rounds=3", *schedule, *NARROW_CNN)
    assert [h["lr"] for h in logged.history[:3]] == pytest.approx(expected)
    notes = [line for line in capsys.readouterr().err.splitlines() if "deprecated" in line]
    assert len(notes) == 1 and "read as client.lr={schedule: " in notes[0]
    assert "lr" not in run(tmp_path, "client.lr=0.05", *NARROW_CNN, name="constant").history[0]
    with pytest.raises(ConfigError, match=r"client\.lr_schedule=.*PlainNet defines its own"):
        quickstart(*TINY, *OWN, *schedule)  # its own configure_optimizers decides its lr


def test_no_logging_costs_nothing_visible(tmp_path):
    """A module that logs nothing adds no train/ keys (and the bit-exact fingerprints of
    every built-in run are unchanged: benchmarks/fingerprint.py)."""
    result = run(tmp_path, *NARROW_CNN)
    assert not [k for k in result.history[0] if k.startswith("train/")]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert "train/" not in json.loads(lines[0])
