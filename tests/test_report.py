"""``fedsim report``: every plot of a finished run folder, drawn from its files alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tracking_runs import tiny_runs

from fedsim.cli import main
from fedsim.tracking.report import REPORT_PLOTS, load_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return tiny_runs(tmp_path_factory.mktemp("tracking_runs"))


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
