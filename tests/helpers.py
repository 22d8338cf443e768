"""Small helpers shared by test modules: configs, builders for the algorithm seam (federation,
client info, a driven round), a fake probe and comparisons."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.algorithms.base import ClientInfo, FederationInfo
from fedsim.algorithms.sums import WeightedSum, merge_sums
from fedsim.config import load_config
from fedsim.storage import ClientStateStore
from lightning_modules.flat_params import ParamEntry, ParamLayout

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
RAY_SYSTEM_PREFIXES = ("(raylet)", "(gcs_server)")

TIMING_KEYS = ("seconds", "train_seconds_max_worker")  # wall-clock: differ run to run
# FedAvgCNN at a quarter of PFLlib's widths (convolutions of 16 and 32 filters, FC 128: 80 k
# parameters instead of 582 k, ~2.7x faster a step on one CPU thread), for tests whose claim
# does not rest on the network's size (benchmarks/ keep PFLlib's widths)
NARROW_CNN = ("model.args.channels=[16,32]", "model.hidden=[128]")
# a few-second real run: 600 mnist-5k digits, IID over 6 clients, on this process
TINY_MNIST = [
    "seed=0",
    "data.name=mnist-5k",
    "data.max_samples=600",
    "data.num_clients=6",
    "data.partition.name=iid",
    "client.lr=0.05",
    "runtime.executor=local",
    "runtime.device=cpu",
]


def stderr_lines(err: str) -> list[str]:
    """The non-blank stderr lines fedsim and its workers printed. Ray's own daemons forward
    warnings about the machine (a disk over 95% full, memory pressure) to the driver as
    ``(raylet) ...`` lines; those are the machine's state, not fedsim's output, so a
    "one line" promise is checked without them."""
    plain = [(line, _ANSI.sub("", line).lstrip()) for line in err.splitlines() if line.strip()]
    return [line for line, text in plain if not text.startswith(RAY_SYSTEM_PREFIXES)]


def untimed(history: list[dict]) -> list[dict]:
    """Round summaries without their wall-clock keys, for comparing two runs."""
    return [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in history]


def lent_ray_executor(sim: Any, held: dict[str, Any]) -> Any:
    """A Ray executor for ``sim`` on the worker actors the ``ray_pool`` fixture lends (2
    workers, half a CPU each); its ``close`` hands them back to ``held`` rather than killing
    them (a pool that lost a worker is closed and not handed back: the next module starts
    new actors)."""
    from fedsim.runtime.ray_executor import RayExecutor

    runtime = dataclasses.replace(sim.cfg.runtime, executor="ray", workers=2, cpus_per_worker=0.5)
    executor = RayExecutor(runtime, sim.worker_spec, sim.data, pool=held.pop("pool"))
    return hand_back_on_close(executor, lambda pool: held.__setitem__("pool", pool))


def hand_back_on_close(executor: Any, keep: Callable[[Any], None]) -> Any:
    """Make ``executor.close`` give its live actors to ``keep`` (``detach_pool``) before it
    closes, instead of killing them; a pool that is closed or lost a worker is not kept."""
    close = executor.close

    def detach_then_close() -> None:
        try:
            with contextlib.suppress(RuntimeError):  # closed, or a worker is gone
                keep(executor.detach_pool())
        finally:
            close()

    executor.close = detach_then_close
    return executor


def lend_pool_to_runs(monkeypatch: Any, held: dict[str, Any]) -> None:
    """Make ``run_experiment`` (so an in-process ``fedsim run``, ``fedsim.cli.main``) on Ray
    take the worker actors ``held`` lends (conftest ``ray_pool``) and hand them back at the
    end, instead of starting and killing its own; a CLI run then builds its executor when
    the simulation is built (no early start). Without a lent pool it starts its own."""
    import fedsim.cli.commands as cli
    import fedsim.experiment as experiment
    from fedsim.runtime.factory import make_executor

    def borrow(runtime: Any, spec: Any, data: Any, pool: Any = None) -> Any:
        executor = make_executor(runtime, spec, data, pool=held.pop("pool", None))
        return hand_back_on_close(executor, lambda kept: held.__setitem__("pool", kept))

    monkeypatch.setattr(experiment, "make_executor", borrow)
    monkeypatch.setattr(cli, "start_early", lambda cfg, resume=False: None)


def run_local_and_ray(cfg: Any, held: dict[str, Any]) -> tuple[Any, Any]:
    """Run ``cfg`` on the local executor, then on the worker actors the ``ray_pool``
    fixture's holder ``held`` lends (``lent_ray_executor``); the two ``RunResult`` s."""
    from fedsim.runtime.executor import LocalExecutor
    from fedsim.simulation import Simulation

    torch.set_num_threads(1)
    results = []
    for executor in ("local", "ray"):
        sim = Simulation(cfg)
        if executor == "local":
            pool = LocalExecutor(sim.worker_spec, sim.data)
        else:
            pool = lent_ray_executor(sim, held)
        try:
            results.append(sim.run(pool))
        finally:
            pool.close()
    return results[0], results[1]


def quickstart(*overrides: str) -> Any:
    """``configs/quickstart.yaml`` on the local executor, with ``overrides`` on top."""
    return load_config("configs/quickstart.yaml", ["runtime.executor=local", *overrides])


# ------------------------------------------------------------------ the algorithm seam


def layout(params: Sequence[tuple[str, tuple[int, ...]]]) -> ParamLayout:
    """A flat layout of ``(name, shape)`` tensors, one after the other in the given order."""
    entries, offset = [], 0
    for name, shape in params:
        numel = math.prod(shape)
        entries.append(ParamEntry(name, shape, offset, numel))
        offset += numel
    return ParamLayout(entries)


def federation(
    params: Sequence[tuple[str, tuple[int, ...]]] | ParamLayout,
    sizes: Sequence[int] | None = None,
    class_counts: np.ndarray | None = None,
    *,
    head: list[str] | None = None,
    blocks: dict[str, list[str]] | None = None,
    client_train_indices: list[np.ndarray] | None = None,
    adapters: Any = None,
) -> FederationInfo:
    """A hand-made federation: one client per entry of ``sizes`` (its train size).

    ``params``: ``(name, shape)`` pairs (see ``layout``) or a layout. ``class_counts``:
    default ``[n, 0]`` per client (2 classes); given alone, ``sizes`` are its row sums.
    ``head``: default the last tensor; ``blocks``: default one block per tensor;
    ``adapters``: what an adapted model declares (``lightning_modules.adapters.AdapterParts``)."""
    grid = params if isinstance(params, ParamLayout) else layout(params)
    names = [e.name for e in grid.entries]
    if class_counts is None:
        class_counts = np.array([[n, 0] for n in sizes])
    if sizes is None:
        sizes = class_counts.sum(axis=1)
    blocks = blocks or {name: [name] for name in names}
    return FederationInfo(
        layout=grid,
        num_clients=len(sizes),
        num_classes=class_counts.shape[1],
        train_sizes=np.asarray(sizes),
        class_counts=class_counts,
        head_names=names[-1:] if head is None else head,
        block_names=list(blocks),
        block_parameters=dict(blocks),
        client_train_indices=client_train_indices or [],
        adapters=adapters,
    )


def module_federation(module: Any, class_counts: np.ndarray) -> FederationInfo:
    """The federation of an ``FLModule``: its layout, output layer (head) and blocks."""
    return federation(
        ParamLayout.from_module(module),
        class_counts=class_counts,
        head=module.head_parameters(1),
        blocks={b: module.block_parameters(b) for b in module.block_names},
    )


def client_info(
    fed: FederationInfo, client: int, round_idx: int = 0, probe=None, epochs: int = 1
) -> ClientInfo:
    """``Algorithm.client_info`` (the client's statistics in ``fed``), with a worker probe and
    its local ``epochs`` this round (the run plan's, as the worker gives them)."""
    return ClientInfo(
        client=client,
        num_train=int(fed.train_sizes[client]),
        class_counts=fed.class_counts[client],
        round=round_idx,
        probe=probe,
        epochs=epochs,
    )


def leaf_params(flat: torch.Tensor, grid: ParamLayout) -> dict[str, torch.Tensor]:
    """The tensors of ``grid`` as leaf parameters holding copies of ``flat``'s values."""
    return {e.name: grid.view(flat, e.name).clone().requires_grad_(True) for e in grid.entries}


def reduce_updates(updates: Sequence, workers: Sequence[int]) -> dict[str, WeightedSum]:
    """Accumulate client updates on the given workers, then merge in worker order."""
    parts: list[dict[str, WeightedSum]] = [{} for _ in range(max(workers, default=-1) + 1)]
    for update, worker in zip(updates, workers, strict=True):
        for key, (weight, value) in update.sums.items():
            parts[worker].setdefault(key, WeightedSum()).add(weight, value)
    return merge_sums(parts)


def run_round(
    algo,
    state,
    models: Mapping[int, torch.Tensor] | Sequence[torch.Tensor],
    *,
    round_idx: int = 0,
    states: Mapping[int, Any] | None = None,
    probes: Sequence[Any] | None = None,
    workers: Sequence[Sequence[int]] | None = None,
    epochs: Sequence[int] | None = None,
):
    """Drive the seam like the runtime does: every client starts from the broadcast and
    'trains' to ``models[c]``; the sums are reduced per worker (``workers``: the clients of
    each, default one worker for all) and merged in order; ``probes[c]``: client c's probe;
    ``epochs[c]``: client c's local epochs (default 1).
    Returns (new state, {client: update})."""
    trained = dict(models) if isinstance(models, Mapping) else dict(enumerate(models))
    states = states or {}
    broadcast = algo.broadcast(state)
    updates, order, where = {}, [], []
    for worker, share in enumerate(workers or (tuple(trained),)):
        for c in share:
            probe = probes[c] if probes else None
            info = client_info(algo.federation, c, round_idx, probe, epochs[c] if epochs else 1)
            plan = algo.client_start(broadcast, {}, states.get(c), info)
            updates[c] = algo.client_finish(plan, trained[c], states.get(c), info)
            order.append(updates[c])
            where.append(worker)
    return algo.aggregate(state, reduce_updates(order, where), {}, algo.context(round_idx)), updates


class FixedProbe:
    """Returns the same validation gradient whatever the parameters."""

    def __init__(self, grad: torch.Tensor):
        self.grad = grad

    def gradient(self, params, indices=None):
        return self.grad.clone(), 0.0


# ------------------------------------------------------------------ comparisons


def assert_same(a: Any, b: Any, where: str = "state") -> None:
    """Equal to the bit: tensors, arrays, stores (by contents), containers, plain values."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, ClientStateStore):
        assert a.clients() == b.clients(), where
        for client in a.clients():
            assert_same(a.get(client), b.get(client), f"{where}[{client}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def invoke_cli(argv: list[str], capsys: Any, cwd: Path) -> tuple[int, str]:
    """Run ``fedsim`` with ``argv`` in ``cwd``; (exit code, stderr). Nothing may be left in
    ``cwd`` (a refused run writes no folder)."""
    from fedsim.cli import main

    before = sorted(p.name for p in cwd.iterdir())
    old = os.getcwd()
    os.chdir(cwd)
    try:
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's own errors
            code = exit_.code if isinstance(exit_.code, int) else 2
    finally:
        os.chdir(old)
    err = capsys.readouterr().err
    assert sorted(p.name for p in cwd.iterdir()) == before, f"{argv} left files behind"
    return code, err


def one_line_error(argv: list[str], capsys: Any, cwd: Path) -> str:
    """The single stderr line of a run refused with exit code 2 (asserted)."""
    code, err = invoke_cli(argv, capsys, cwd)
    lines = stderr_lines(err)
    assert code == 2 and len(lines) == 1, err
    return lines[0]


def refused_check(overrides: str, capsys: Any, tmp_path: Path) -> str:
    """The one-line error of ``fedsim run --check`` on 400 samples over 10 IID clients with
    ``overrides`` (space-separated key=value, replacing those defaults); asserts exit 2 and
    no folder."""
    config, work = tmp_path / "config.yaml", tmp_path / "work"
    config.write_text("rounds: 1\n")
    work.mkdir()
    given = {o.split("=")[0] for o in overrides.split()}
    base = ["runtime.executor=local", "data.max_samples=400", "data.num_clients=10",
            "data.partition.name=iid"]  # fmt: skip
    base = [o for o in base if o.split("=")[0] not in given]  # the test's own value wins
    argv = ["run", str(config), "--check", "--no-progress", *base, *overrides.split()]
    return one_line_error(argv, capsys, work)


def last_wins(argv: list[str]) -> list[str]:
    """``argv`` with each ``key=value`` override kept once, its last value (the command line
    refuses a key given twice; tests layer a base list and their own values)."""
    keys = [a.split("=", 1)[0] if "=" in a and not a.startswith("-") else None for a in argv]
    last = {k: i for i, k in enumerate(keys) if k is not None}
    return [a for i, (a, k) in enumerate(zip(argv, keys, strict=True)) if k is None or last[k] == i]


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited but not reaped, does not)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until_gone(pids: list[int], timeout: float = 60.0) -> list[int]:
    """The processes among ``pids`` still running after up to ``timeout`` seconds (a failure
    guard: it returns as soon as they are gone)."""
    import time

    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if running(p)]
        time.sleep(0.2)
    return alive


@contextlib.contextmanager
def newcomers_unevaluated(members: int) -> Iterator[None]:
    """While it lasts, the round loop plans no evaluation of a held-out client (ids from
    ``members`` on): the control run of the tests that show newcomers change nothing."""
    import fedsim.rounds.loop as loop_module

    original = loop_module.RoundLoop.plan

    def members_only(self, round_idx):
        planned = original(self, round_idx)
        kept = frozenset(c for c in planned.evaluated if c < members)
        return dataclasses.replace(planned, evaluated=kept)

    loop_module.RoundLoop.plan = members_only
    try:
        yield
    finally:
        loop_module.RoundLoop.plan = original
