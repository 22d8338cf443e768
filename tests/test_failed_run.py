"""A run that raises mid-way (issue 40, item 6): its folder says ``failed``, with the error
line and the rounds completed; the CLI prints one line; reusing the folder is refused with
the options that work there (``--resume`` only where a checkpoint exists)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import stderr_lines

from fedsim.cli import main
from fedsim.errors import error_line

QUICKSTART = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
TINY = ["rounds=3", "data.num_clients=4", "data.max_samples=400", "runtime.executor=local"]
FAILING = "algorithm.name=failing_plugins:FailsInRoundOne"


def cli(capsys, *argv: str) -> tuple[int, str]:
    """(exit code, the one stderr line) of ``fedsim run``; asserts it is one line."""
    code = main(["run", QUICKSTART, *TINY, "--no-progress", *argv])
    lines = stderr_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return code, lines[0]


def test_a_run_that_raises_says_failed_and_overwrite_replaces_it(tmp_path, capsys):
    out = tmp_path / "run"
    code, line = cli(capsys, FAILING, "--out", str(out))
    assert code == 1
    assert line.startswith("fedsim: error: round 1 failed: ValueError: aggregate broke on purpose")
    assert f"{out} is kept" in line and "--overwrite" in line and "--resume" not in line
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds_completed"] == 1
    assert summary["error"] == "ValueError: aggregate broke on purpose"
    assert summary["final"]["round"] == 0  # what ran is summarized
    assert "raise ValueError" in (out / "traceback.txt").read_text()
    rounds = [json.loads(row)["round"] for row in (out / "metrics.jsonl").read_text().splitlines()]
    assert rounds == [0]

    code, line = cli(capsys, FAILING, "--out", str(out))  # no checkpoint: --resume cannot work
    assert code == 2 and "already holds a run that failed after 1 completed rounds" in line
    assert "no checkpoint to resume from: replace it with --overwrite" in line
    assert "--resume" not in line
    code, line = cli(capsys, FAILING, "--out", str(out), "--resume")
    assert code == 2 and "no checkpoint in" in line and "run it again with --overwrite" in line

    assert main(["run", QUICKSTART, *TINY, "--no-progress", "--out", str(out), "--overwrite"]) == 0
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    assert not (out / "traceback.txt").exists()


def test_a_failed_run_with_a_checkpoint_may_be_resumed(tmp_path, capsys):
    out = tmp_path / "run"
    code, line = cli(capsys, FAILING, "checkpoint_every=1", "--out", str(out))
    assert code == 1 and line.endswith("or continue from its checkpoint with --resume")
    code, line = cli(capsys, FAILING, "checkpoint_every=1", "--out", str(out))
    assert code == 2 and "failed after 1 completed rounds: continue it with --resume," in line


def test_error_line_is_one_line_and_prefers_a_ray_tasks_cause():
    class TaskError(Exception):  # what Ray raises on the driver for a task's error
        def __init__(self, cause: BaseException) -> None:
            super().__init__("ray::Worker.run()\n  File 'x.py', line 1\n" + str(cause))
            self.cause = cause

    assert error_line(TaskError(TypeError("bad\nshape"))) == "TypeError: bad shape"
    assert error_line(RuntimeError()) == "RuntimeError"
    assert len(error_line(ValueError("x" * 5000))) < 600
