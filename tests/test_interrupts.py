"""The interrupt promise (docs/explanation/reliability.md, row "Ctrl-C, SIGTERM"), end to end.

``fedsim run`` is started as a subprocess on a small real workload; once a round has
completed it gets SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption), on the local
executor (an asynchronous run: clients are in flight when it stops) and on Ray (a
synchronous one). Each case checks that the run

- exits 130 (SIGINT) / 143 (SIGTERM), no traceback, its summary.json saying ``interrupted``;
- ends stderr with one line holding the exact ``--resume`` command;
- checkpointed its last completed round although ``checkpoint_every`` is larger than the
  run (the checkpoint is written at the stop; asynchronous: with the clients in flight);
- when that printed command is run, completes, and then equals an uninterrupted run of the
  same config to the bit: metrics.jsonl (wall times aside), clients.csv, and the final
  checkpoint's server state and client states.

Two cases, one per executor and one per signal: SIGINT to the local executor's asynchronous
run, and SIGTERM (how a cluster's scheduler stops a job) to a Ray run that starts its own
Ray, after which no process it started (GCS, raylet, worker actors) remains. Both signals
take the same path in the run (``fedsim.interrupts`` holds them alike; only the exit code
and the word differ): the other two pairs would each cost a process with its ~7 s of
imports and a full run, for no path of the code that these two do not take. The
uninterrupted run and the printed resume command run in this process (``fedsim.cli.main``
with the command's arguments; for Ray on the worker actors the session lends,
``ray_pool``): the same computation as a new process's, without another ~7 s of imports
each (a Ray pool equals the in-process executor to the bit, whatever its size).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch
from helpers import NARROW_CNN, lend_pool_to_runs, stderr_lines, untimed, wait_until_gone

from fedsim.checkpoint import latest_checkpoint, load_checkpoint
from fedsim.cli import main

REPO = Path(__file__).resolve().parents[1]
GUARD_S = 300  # a failure guard for a run that hangs, never a timing assertion
ROUNDS = 8
# the narrow FedAvgCNN: a stop and its resume are the same path whatever the net's size
SMALL = ["data.num_clients=4", "data.max_samples=400", *NARROW_CNN]
ASYNC = ["asynchronous.enabled=true", "asynchronous.buffer_size=2",
         "system.speeds=slow_fraction:0.5,4"]  # fmt: skip
# rounds short; checkpoint_every > rounds: only the stop writes a checkpoint mid-run. The
# local executor's runs are asynchronous (clients in flight at the stop), Ray's synchronous
EXECUTOR = {"local": ["runtime.executor=local", *ASYNC],
            "ray": ["runtime.executor=ray", "runtime.workers=1"]}  # fmt: skip


# the run as a terminal starts it, Ctrl-C raising KeyboardInterrupt: a child of a process
# that ignores SIGINT (a pytest-xdist worker, a background job of a script) inherits the
# ignoring, and Python (and so fedsim) keeps ignoring an inherited SIG_IGN, as it should
AS_IN_A_TERMINAL = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from fedsim.cli import main; sys.exit(main(sys.argv[1:]))"
)


def argv(executor: str, out: Path) -> list[str]:
    return [sys.executable, "-c", AS_IN_A_TERMINAL, "run", "configs/quickstart.yaml",
            f"rounds={ROUNDS}", "checkpoint_every=100", *SMALL, *EXECUTOR[executor],
            "--out", str(out), "--no-progress"]  # fmt: skip


def environment(ray_address: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONUNBUFFERED="1", RAY_AUTH_MODE="disabled", WANDB_MODE="offline")
    if ray_address is not None:
        env["RAY_ADDRESS"] = ray_address
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return env


def metric_lines(run_dir: Path) -> list[dict]:
    text = (run_dir / "metrics.jsonl").read_text().splitlines()
    return untimed([json.loads(line) for line in text])


def equal(a: Any, b: Any) -> bool:
    """Bit-equal: tensors by dtype, shape and value; containers item by item."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(equal, a, b))
    if hasattr(a, "__dict__") and type(a).__eq__ is object.__eq__:
        return type(a) is type(b) and equal(vars(a), vars(b))
    return bool(a == b)


def assert_same_run(got: Path, want: Path) -> None:
    assert metric_lines(got) == metric_lines(want)
    assert metric_lines(got)[-1]["round"] == ROUNDS  # then the final evaluation
    assert (got / "clients.csv").read_bytes() == (want / "clients.csv").read_bytes()
    mine, theirs = (load_checkpoint(latest_checkpoint(run)) for run in (got, want))
    assert mine.rounds_trained == theirs.rounds_trained == ROUNDS
    assert equal(mine.state, theirs.state)
    assert equal(mine.client_states, theirs.client_states)
    assert json.loads((got / "summary.json").read_text())["status"] == "completed"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Any:
    """One uninterrupted run per executor, made the first time a case asks for it: in this
    process (``fedsim.cli.main``; for Ray on the lent actors the case set up), which saves a
    process start (~5-20 s of imports) and is the same computation as the command line's."""
    runs: dict[str, Path] = {}

    def run(executor: str) -> Path:
        if executor not in runs:
            if executor == "ray":
                request_ray = pytest.importorskip("ray")
                assert request_ray.is_initialized()  # the case took ray_address first
            out = tmp_path_factory.mktemp("uninterrupted") / executor
            assert main(argv(executor, out)[3:]) == 0
            runs[executor] = out
        return runs[executor]

    return run


CASES = [  # (executor, signal, whether the run starts its own Ray)
    pytest.param("local", signal.SIGINT, False, id="local-SIGINT"),
    pytest.param("ray", signal.SIGTERM, True, id="ray-SIGTERM-own-ray", marks=pytest.mark.slow),
]


@pytest.mark.slow
@pytest.mark.parametrize(("executor", "signum", "own_ray"), CASES)
def test_interrupted_run_says_how_to_resume_and_resumes_to_the_bit(
    executor, signum, own_ray, uninterrupted, request, monkeypatch, tmp_path
):
    # the resume and the uninterrupted run join the shared cluster: no further Ray starts
    env = environment(request.getfixturevalue("ray_address") if executor == "ray" else None)
    if executor == "ray":  # and borrow its lent actors: no further actor starts either
        lend_pool_to_runs(monkeypatch, request.getfixturevalue("ray_pool"))
    out = tmp_path / "run"
    proc = subprocess.Popen(argv(executor, out), cwd=REPO, env=environment(None) if own_ray
                            else env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + GUARD_S
        metrics = out / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().count("\n") >= 1):  # a round
            assert proc.poll() is None, proc.stderr.read()[-4000:]
            assert time.monotonic() < deadline, f"no round completed in {GUARD_S} s"
            time.sleep(0.05)
        started = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        if own_ray:
            assert len(started) >= 3  # at least GCS, raylet and the worker actor
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=GUARD_S)
    finally:
        if proc.poll() is None:  # a failed case leaves nothing running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    assert proc.returncode != 0, f"the run ended before the signal: more rounds? {err}"
    assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum], err
    assert "Traceback" not in err, err
    lines = stderr_lines(err)
    last = lines[-1]
    assert [line for line in lines if "--resume" in line] == [last], err
    if executor == "local":
        assert len(lines) == 1, err  # nothing else at all
    how = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
    stop = re.fullmatch(rf"fedsim: {re.escape(how)} in (\S+) after (\d+) completed rounds; "
                        r"resume with: (fedsim run .* --resume)", last)  # fmt: skip
    assert stop is not None, last
    assert stop[1] == str(out)
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    rounds_done = int(stop[2])
    assert 1 <= rounds_done < ROUNDS, last
    saved = load_checkpoint(latest_checkpoint(out))
    assert saved.rounds_trained == rounds_done  # the last completed round, checkpoint_every=100
    if executor == "local":  # asynchronous: the clients training at the stop are saved
        assert saved.round_kind["schedule"]["in_flight"]
    if own_ray:
        assert wait_until_gone(started) == []  # no process the run started remains
    reference = uninterrupted(executor)
    assert metric_lines(out) == metric_lines(reference)[:rounds_done]

    printed = shlex.split(stop[3])
    assert printed[:2] == ["fedsim", "run"] and printed[-1] == "--resume", printed
    assert main(printed[1:]) == 0  # `fedsim` in this process, as the uninterrupted run
    assert_same_run(out, reference)
