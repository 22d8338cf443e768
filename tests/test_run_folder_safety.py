"""A run never mixes with another, never leaves half a folder, and stops cleanly.

Regression tests for issue 13: ``--out`` on a file or an existing run, ``--overwrite``,
runtime errors that used to leave an empty ``runs/``, divergence (Ctrl-C: test_interrupts.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import last_wins, stderr_lines

from fedsim.cli import main

TINY = [
    "rounds=2",
    "data.num_clients=4",
    "data.max_samples=400",
    "runtime.executor=local",
    "client.lr=0.05",
]


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(last_wins(argv))
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = stderr_lines(err)
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_out_on_a_file_or_under_a_file_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (blocker, blocker / "run"):
        code, err = run_cli(["run", "configs/quickstart.yaml", *TINY, "--out", str(out)], capsys)
        assert code == 2 and "--out" in one_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_existing_run_is_refused_and_overwrite_replaces_it(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        run_cli(
            ["run", "configs/quickstart.yaml", *TINY, "--out", str(out), "--no-progress"], capsys
        )[0]
        == 0
    )
    (out / "stale.txt").write_text("from an older run")
    first = (out / "metrics.jsonl").read_text()
    code, err = run_cli(["run", "configs/quickstart.yaml", *TINY, "--out", str(out)], capsys)
    line = one_line(err)
    assert code == 2 and "--overwrite" in line
    assert "--resume" not in line  # it has no checkpoint: --resume cannot continue it
    assert (out / "metrics.jsonl").read_text() == first  # untouched
    code, _ = run_cli(
        [
            "run",
            "configs/quickstart.yaml",
            *TINY,
            "--out",
            str(out),
            "--overwrite",
            "--no-progress",
        ],
        capsys,
    )
    assert code == 0
    assert not (out / "stale.txt").exists()  # cleared first
    assert (out / "metrics.jsonl").read_text().count("\n") == 3


@pytest.mark.parametrize(
    "override, key",
    [
        ("runtime.device=cuda", "runtime.device"),
        ("runtime.gpus_per_worker=1", "runtime.gpus_per_worker"),
    ],
)
def test_impossible_runtime_leaves_no_folder(override, key, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    executor = "runtime.executor=ray" if "gpus" in override else "runtime.executor=local"
    config = Path(__file__).parents[1] / "configs" / "quickstart.yaml"
    code, err = run_cli(["run", str(config), *TINY, executor, override], capsys)
    assert code == 2 and one_line(err).startswith(f"fedsim: error: {key}=")
    assert list(tmp_path.iterdir()) == []


def test_divergence_stops_with_a_status_and_the_rounds_it_ran(tmp_path, capsys):
    out = tmp_path / "run"
    code, err = run_cli(
        ["run", "configs/quickstart.yaml", *TINY, "rounds=3", "client.lr=1e30", "--out", str(out)],
        capsys,
    )
    line = one_line(err)
    assert code == 1 and "non-finite" in line and "lower client.lr=1e+30?" in line, line
    assert f"{out} is kept" in line and "noise" not in line  # no DP: the lr alone is named
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged"
    assert summary["rounds_completed"] == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows and rows[-1]["warnings"] and rows[-1]["failed_clients"]
    assert (out / "clients.csv").read_text().count("\n") > 1  # rows, not just the header


def test_every_failed_round_warns_even_when_the_run_goes_on(tmp_path, capsys):
    out = tmp_path / "run"
    code, _ = run_cli(
        [
            "run",
            "configs/quickstart.yaml",
            *TINY,
            "client.lr=1e30",
            "max_failed_fraction=1",
            "--out",
            str(out),
            "--no-progress",
        ],
        capsys,
    )
    assert code == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all("no client finished" in r["warnings"][0] for r in rows if r["round"] < 2)
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
