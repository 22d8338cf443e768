"""The run plan (fedsim/run_plan.py): every per-round and per-client setting resolved once.

The values are checked against hand computations, the simulation is checked to hand the
same objects to everything that reads them, and the source is scanned so that none of them
is computed a second time somewhere else (the reason the plan exists).
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from fedsim.config import load_config
from fedsim.run_plan import (
    LearningRate,
    LocalWork,
    ModelBuild,
    OptimizerSettings,
    default_buffer_size,
    resolve_run_plan,
)

REPO = Path(__file__).resolve().parents[1]


def round_lrs(*overrides: str, rounds: int = 5) -> list[float]:
    cfg = load_config(None, [f"rounds={rounds}", *overrides])
    plan = resolve_run_plan(cfg, "local", 4)
    return [plan.values.at(r).lr for r in range(rounds)]


def test_learning_rate_of_each_round_by_hand():
    assert LearningRate(0.1).base == 0.1
    assert round_lrs("client.lr=0.1") == [0.1] * 5
    exponential = round_lrs("client.lr={schedule: exponential, initial: 0.1, decay: 0.5}")
    assert exponential[3] == pytest.approx(0.1 * 0.125)
    cosine = round_lrs("client.lr={schedule: cosine, initial: 0.2}", rounds=4)
    assert [cosine[r] for r in (0, 2)] == pytest.approx([0.2, 0.1])
    assert cosine[1] == pytest.approx(0.2 * 0.5 * (1 + math.cos(math.pi / 4)))


def test_local_epochs_cycle_over_the_clients():
    assert LocalWork(3).all(4) == [3, 3, 3, 3]
    cycled = LocalWork(1, (4, 1, 2))
    assert cycled.all(5) == [4, 1, 2, 4, 1] and cycled.of(7) == 1


def test_cohort_and_buffer_sizes():
    cfg = load_config(None, ["join_ratio=0.35", "data.num_clients=20"])
    plan = resolve_run_plan(cfg, "local", 20)
    assert plan.cohort_size == plan.server_cohort == 7  # int(0.35 x 20)
    assert "join_ratio=0.35 x data.num_clients=20" in plan.cohort_source
    assert resolve_run_plan(load_config(None, ["join_ratio=0.01"]), "local", 20).cohort_size == 1
    buffered = resolve_run_plan(load_config(None, ["join_ratio=0.35"]), "buffered", 20)
    assert buffered.concurrency == 7 and buffered.server_cohort == default_buffer_size(7) == 3
    given = [
        "asynchronous.enabled=true",
        "asynchronous.concurrency=10",
        "asynchronous.buffer_size=4",
    ]
    plan = resolve_run_plan(load_config(None, given), "buffered", 20)
    assert (plan.concurrency, plan.server_cohort) == (10, 4)
    assert "default" not in plan.cohort_source


def test_optimizer_settings_reach_a_built_in_module_by_one_builder():
    from fedsim.runtime.model_fit import build_client_model

    cfg = load_config(None, ["client.optimizer=adam", "client.lr=0.01", "client.betas=[0.8,0.9]"])
    settings = OptimizerSettings.from_config(cfg)
    kwargs = {"in_channels": 1, "num_classes": 10, "image_size": 28}
    build = ModelBuild("fedavg_cnn", {}, kwargs, settings)  # no optimizer key in the kwargs
    module = build_client_model(build)
    optimizer = module.configure_optimizers()
    assert type(optimizer).__name__ == "Adam"
    assert optimizer.param_groups[0]["lr"] == 0.01
    assert optimizer.param_groups[0]["betas"] == (0.8, 0.9)


def test_the_simulation_hands_every_reader_the_plans_values():
    from fedsim.simulation import Simulation, build_data

    overrides = [
        "data.max_samples=300", "data.num_clients=6", "join_ratio=0.5", "rounds=4",
        "client.lr_schedule=exponential", "client.lr_decay=0.5", "client.epochs_by_client=[2,1]",
        "runtime.executor=local",
    ]  # fmt: skip
    cfg = load_config(None, overrides)
    sim = Simulation(cfg, build_data(cfg))
    plan = sim.plan
    assert sim.worker_spec.client is plan.client  # a slice of the plan, not a copy
    assert sim.worker_spec.model is plan.model  # the one model build
    assert plan.values.at(2).lr_scale == pytest.approx(0.25)  # the lr travels with the round
    assert [plan.epochs.of(c) for c in range(6)] == [2, 1, 2, 1, 2, 1]  # the worker's ClientInfo
    assert len(sim.sample_cohort(0)) == plan.cohort_size == 3
    assert plan.values.at(2).lr == pytest.approx(0.005 * 0.25)


def test_virtual_time_counts_each_clients_own_epochs():
    from fedsim.rounds.clock.build import compute_clock

    cfg = load_config(None, ["system.speeds=constant"])
    sizes = np.array([10, 10, 10])
    _, same = compute_clock(cfg, sizes, LocalWork(1))
    _, cycled = compute_clock(cfg, sizes, LocalWork(1, (1, 3)))
    assert cycled.tolist() == [same[0], 3 * same[1], same[2]]


# names whose computation has one home: (called name, the modules allowed to call it)
ONE_HOME = {
    "lr_scale": ("fedsim.run_plan",),
    "default_buffer_size": ("fedsim.run_plan",),
    "cohort_size": ("fedsim.run_plan",),
    "model_upload": ("fedsim.deployment.decision",),
    "ClientTask": ("fedsim.rounds.dispatch",),
    # the worker's spec is the plan's (no second derivation of the model's or clients' settings)
    "WorkerSpec": ("fedsim.runtime.worker",),
    "ModelBuild": ("fedsim.run_plan",),
    "LearningRate": ("fedsim.run_plan",),
    "OptimizerSettings": ("fedsim.run_plan",),
    # one seed helper for every torch32 stream (fedsim/streams.py)
    "SeedSequence": ("fedsim.streams", "fedsim.rounds.clock.virtual", "fedsim.deployment.privacy"),
}


def calls_outside_home() -> list[str]:
    found = []
    for path in sorted((REPO / "fedsim").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            homes = ONE_HOME.get(name or "")
            if homes is not None and module not in homes:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} calls {name}")
    return found


def test_each_value_is_computed_in_one_place():
    assert calls_outside_home() == []


def test_no_second_derivation_of_the_plans_values():
    """What issue 52 removed stays removed: no lr fallback beside the plan, no lr carried by
    the worker's spec (it travels with each round), no model-kwargs builder beside the
    plan's, no seed helper beside ``streams.torch_seed``, the built-in lr written once."""
    fedsim = sorted((REPO / "fedsim").rglob("*.py"))
    sources = {p.relative_to(REPO).as_posix(): p.read_text() for p in fedsim}
    assert "LearningRate.from_config(cfg) if" not in sources["fedsim/rounds/loop.py"]
    assert "spec.lr" not in "".join(sources.values())
    assert "def model_kwargs(" not in sources["fedsim/simulation.py"]
    for name in ("def client_seed(", "def probe_seed(", "def task_seed("):
        assert not any(name in text for text in sources.values()), name
    for path in ("fedsim/run_plan.py", "fedsim/runtime/worker.py", "fedsim/simulation.py"):
        assert "0.005" not in sources[path], path  # BUILT_IN_LR, from model_optimizer.py


def test_the_old_lr_keys_are_a_schedule_on_client_lr_to_the_bit():
    """``client.lr_schedule`` + ``lr_decay`` read as the schedule with the same formula."""
    old = load_config(None, ["client.lr=0.05", "client.lr_schedule=exponential",
                             "client.lr_decay=0.7"])  # fmt: skip
    new = load_config(None, ["client.lr={schedule: exponential, initial: 0.05, decay: 0.7}"])
    assert old.schedules == new.schedules and old.to_dict()["client"] == new.to_dict()["client"]
    cosine = load_config(None, ["client.lr_schedule=cosine"])  # the built-in lr, to 0
    assert cosine.schedules["client.lr"].to_dict() == {
        "schedule": "cosine", "initial": 0.005, "final": 0.0, "rounds": None,
    }  # fmt: skip
    assert "lr_schedule" not in cosine.to_dict()["client"]


def test_the_starting_lr_is_its_own_answer_not_a_contract_checks():
    import pytorch_lightning as pl
    import torch

    from fedsim.runtime.model_contract import check_model
    from fedsim.runtime.model_fit import starting_lr
    from lightning_modules.registry import build_model

    class Own(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.3)

    cnn = build_model("fedavg_cnn", in_channels=1, num_classes=10, image_size=28)
    assert starting_lr(0.05, cnn) == 0.05  # a module that takes client.lr
    assert starting_lr(None, Own()) == 0.3  # a module's own optimizer's
    assert check_model.__annotations__["return"] in (None, "None")
