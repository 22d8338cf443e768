"""``fedsim report``: every plot of a finished run folder, drawn from its files alone."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from fedsim.cli import main
from fedsim.tracking.report import REPORT_PLOTS, load_run

# the shared run folders (conftest.py's ``runs``) are built once in one xdist process
pytestmark = pytest.mark.xdist_group("tracking_runs")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_run_draws_report_plots_at_the_end(runs):
    for run_dir in runs.values():
        for name in REPORT_PLOTS:
            assert (run_dir / "plots" / name).read_bytes().startswith(PNG_MAGIC), name
    # the algorithm's own figure: cwFedAvg has one, FedAvg none
    assert (runs["cwfedavg"] / "plots" / "row_norms.png").read_bytes().startswith(PNG_MAGIC)
    assert not (runs["fedavg"] / "plots" / "row_norms.png").exists()


def test_report_command_redraws_every_plot(runs, tmp_path, capsys):
    run_dir = tmp_path / "copy"
    shutil.copytree(
        runs["cwfedavg"], run_dir, ignore=shutil.ignore_patterns("accuracy_*", "client_*")
    )
    assert not (run_dir / "plots" / "accuracy_curves.png").exists()
    assert main(["report", str(run_dir)]) == 0
    printed = capsys.readouterr().out.split()
    for name in REPORT_PLOTS:
        path = run_dir / "plots" / name
        assert path.read_bytes().startswith(PNG_MAGIC) and path.stat().st_size > 5000
        assert str(path) in printed
    assert str(run_dir / "plots" / "row_norms.png") in printed  # the algorithm's own figure


def test_load_run_reads_every_file(runs):
    run = load_run(runs["fedavg"])
    assert [m["round"] for m in run.metrics] == [0, 1, 2]
    assert sorted(set(run.clients["round"])) == [0, 1, 2]
    final = run.final_clients()
    assert len(final["client"]) == 6 and (final["round"] == 2).all()
    assert run.label == "tiny-fedavg (fedavg)"
    assert run.summary["final"]["round"] == 2 and run.partition["num_clients"] == 6


def test_report_on_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedsim: error: run_dir=") and "no metrics.jsonl" in err
    assert err.count("\n") == 1


def test_report_prints_the_summary_table_fedsim_run_prints(runs, tmp_path, capsys):
    import io
    import json

    from rich.console import Console

    from fedsim.cli import summary_table

    run_dir = tmp_path / "copy"
    shutil.copytree(runs["fedavg"], run_dir, ignore=shutil.ignore_patterns("wandb"))
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    summary = json.loads((run_dir / "summary.json").read_text())
    table = io.StringIO()  # the table `fedsim run` prints, drawn by the same function
    Console(file=table).print(summary_table(summary, "tiny-fedavg: fedavg on mnist-5k"))
    assert table.getvalue() in out
    assert f"{summary['final']['acc_weighted']:.4f}" in out

    (run_dir / "summary.json").unlink()  # a run that never ended: plots, and a one-line note
    assert main(["report", str(run_dir)]) == 0
    captured = capsys.readouterr()
    assert "acc_weighted" not in captured.out and str(run_dir / "plots") in captured.out
    assert captured.err == (
        f"fedsim: warning: {run_dir}: no readable summary.json (the run did not end?), so no "
        "summary table\n"
    )


@pytest.mark.slow
def test_report_on_non_numbers_says_in_one_line_what_it_skipped(runs, tmp_path):
    """Every row's accuracy and a logged value that are not numbers: one warning line each
    (not one per row), and no bare matplotlib source line (an empty plot's legend) on stderr."""
    import subprocess
    import sys

    run_dir = tmp_path / "copy"
    shutil.copytree(runs["fedavg"], run_dir, ignore=shutil.ignore_patterns("wandb", "plots"))
    header, *rows = (run_dir / "clients.csv").read_text().splitlines()
    rows = [r.split(",") for r in rows]
    column = header.split(",").index("accuracy")
    for row in rows:
        row[column] = "x"
    lines = [f"{header},train/acc"] + [",".join(r) + ",MulticlassAccuracy()" for r in rows]
    (run_dir / "clients.csv").write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "fedsim.cli", "report", str(run_dir)],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    err = done.stderr.splitlines()
    last = len(rows) + 1
    assert err == [
        f"fedsim: warning: {run_dir}/clients.csv: {len(rows)} lines (2-{last}): train/acc is "
        "not a number; left out",
        f"fedsim: warning: {run_dir}/clients.csv: {len(rows)} lines (2-{last}): accuracy is "
        "not a number; skipped",
    ], done.stderr
    for name in REPORT_PLOTS:
        assert (run_dir / "plots" / name).read_bytes().startswith(PNG_MAGIC)


def test_a_logged_value_that_is_not_a_number_keeps_its_row(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"round": 0}\n')
    (run_dir / "clients.csv").write_text(
        "client,round,accuracy,train/acc\n0,0,0.5,0.25\n1,0,0.75,not-a-number\n"
    )
    run = load_run(run_dir)
    assert run.clients["accuracy"].tolist() == [0.5, 0.75]
    assert run.clients["train/acc"][0] == 0.25 and math.isnan(run.clients["train/acc"][1])
    assert run.problems == [f"{run_dir}/clients.csv: line 3: train/acc is not a number; left out"]
