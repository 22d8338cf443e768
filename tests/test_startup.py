"""A Ray run's start: Ray comes up while the driver imports and checks; startup.json says when."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers import NARROW_CNN

from fedsim.config import load_config
from fedsim.early_start import start_early
from fedsim.startup_timeline import startup_seconds

QUICKSTART = Path(__file__).parents[1] / "configs" / "quickstart.yaml"
# the narrow FedAvgCNN: start-up and clean-up are not about the net
QUICK = [str(QUICKSTART), "rounds=1", "data.num_clients=4", "data.max_samples=800",
         *NARROW_CNN, "--no-progress"]  # fmt: skip
STEPS = [
    "ray_start_began_s",
    "ray_started_s",
    "actors_created_s",
    "actors_ready_s",
    "first_client_done_s",
    "first_round_done_s",
]


SMALL = ["data.max_samples=400", "data.num_clients=4", *NARROW_CNN]


@pytest.mark.parametrize(
    ("overrides", "resume"),
    [
        (["runtime.executor=local"], False),
        (["runtime.executor=ray"], True),
        (["runtime.executor=ray", "runtime.device=cuda"], False),
        (["runtime.executor=ray", "runtime.gpus_per_worker=1"], False),
    ],
)
def test_runs_that_start_their_own_pool_start_nothing_early(overrides, resume, monkeypatch):
    from fedsim.errors import ConfigError
    from fedsim.runtime import pool_start

    monkeypatch.setattr(pool_start, "start_ray", lambda *a: pytest.fail("Ray was started"))
    cfg = load_config(QUICKSTART, [*SMALL, *overrides])
    try:
        early = start_early(cfg, resume=resume)
    except ConfigError as err:  # a GPU asked for on a machine without one: before any Ray
        assert err.key.startswith("runtime.")
        return
    assert early.pool is None and early.simulation.cfg is cfg


def test_startup_seconds_are_since_the_process_start_in_time_order():
    start = 1000.0
    timeline = {"actors_ready": 1009.5, "ray_started": 1004.0, "driver_ready": 1003.25}
    assert list(startup_seconds(timeline, start).items()) == [
        ("driver_ready_s", 3.25),
        ("ray_started_s", 4.0),
        ("actors_ready_s", 9.5),
    ]


def live_actors(ray) -> set[str]:
    """This process's live (or still starting) actors in the shared cluster: the other test
    process's actors, which come and go, are not counted."""
    from ray._private.state import actors

    job = ray.get_runtime_context().get_job_id()
    return {actor_id for actor_id, info in actors().items()
            if info["JobID"] == job and info["State"] != "DEAD"}  # fmt: skip


def actors_gone_after(ray, before: set[str], seconds: float = 30.0) -> set[str]:
    """Actors of this process started since ``before`` that are still alive once killed
    ones have been marked dead (Ray does it asynchronously); empty when none is left."""
    deadline = time.monotonic() + seconds
    while (left := live_actors(ray) - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_a_ray_run_writes_its_startup_timeline(ray_cluster, tmp_path):
    from fedsim.cli import main

    out = tmp_path / "run"
    before = live_actors(ray_cluster)
    code = main(["run", *QUICK, "runtime.executor=ray", "runtime.workers=1", "--out", str(out)])
    assert code == 0
    startup = json.loads((out / "startup.json").read_text())
    assert [k for k in startup if k in STEPS] == STEPS  # every step, in this order
    assert "driver_ready_s" in startup
    assert all(value > 0 for value in startup.values())
    assert actors_gone_after(ray_cluster, before) == set()  # the pool's actor is gone


def test_bad_data_on_ray_is_one_line_and_leaves_no_worker(ray_cluster, tmp_path, capsys):
    from helpers import last_wins, one_line_error

    before = live_actors(ray_cluster)
    argv = [
        "run",
        *QUICK,
        "runtime.executor=ray",
        "data.num_clients=200",
        "data.partition.name=dirichlet",
        "data.partition.alpha=0.001",
    ]
    line = one_line_error(
        last_wins(argv),
        capsys,
        tmp_path,
    )
    assert line.startswith("fedsim: error: data.partition.alpha=0.001")
    assert ray_cluster.is_initialized()  # the shared cluster was joined, not shut down
    assert actors_gone_after(ray_cluster, before) == set()
