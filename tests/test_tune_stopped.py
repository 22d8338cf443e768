"""``fedsim tune``: a trial stopped early (ASHA) leaves a complete run folder and one count of
its rounds, without Ray: Tune's stop is what its session does, a SystemExit in ``tune.report``
(as in test_tune.py's ``test_a_trial_tune_stops_closes_its_run``)."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pandas as pd
import pytest
from helpers import NARROW_CNN

from fedsim.config import load_config
from fedsim.search.results import close_stopped_runs, collect_rows
from fedsim.search.trial import SweepSettings, TuneReportSink, run_reporting
from fedsim.tracking.report import REPORT_PLOTS

# the narrow FedAvgCNN: a stopped trial's folder is the same for any net
TINY = ["rounds=3", "data.num_clients=10", "join_ratio=0.2", "runtime.executor=local", *NARROW_CNN]


@pytest.mark.slow
def test_a_stopped_trial_leaves_plots_and_one_round_count(tmp_path, monkeypatch):
    """A trial Tune stops at round 1's report has completed rounds 0 and 1: its summary.json,
    its Tune reports and trials.csv all say 2 (round 1 is its last evaluation), and its folder
    has the report plots, as a finished trial's. A trial whose thread was cut short before
    writing them (or while drawing) gets the same summary.json and plots after the search."""
    reported = []

    def report(self, metrics, round_idx):
        reported.append(metrics)
        if round_idx == 1:
            raise SystemExit(0)  # what Tune's session does when it stops the trial

    monkeypatch.setattr(TuneReportSink, "report", report)
    cfg = load_config("configs/quickstart.yaml", [*TINY, "checkpoint_every=1"])
    run_dir = tmp_path / "runs" / "t1"
    sink = TuneReportSink("acc_weighted", run_dir, cfg.rounds)
    with pytest.raises(SystemExit):
        run_reporting(cfg, run_dir, sink, SweepSettings(out=str(tmp_path)), restored=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["rounds_completed"] == 2
    assert [(m["round"], m["rounds_completed"]) for m in reported] == [(0, 1), (1, 2)]
    for name in REPORT_PLOTS:
        assert (run_dir / "plots" / name).stat().st_size > 0

    def tune_result(records: list[dict], trial: str) -> SimpleNamespace:
        return SimpleNamespace(
            metrics_dataframe=pd.DataFrame(records), metrics={"trial_id": trial, "done": True},
            path=str(tmp_path / trial), error=None, config={"client.lr": 0.05},
        )  # fmt: skip

    older = [{k: v for k, v in m.items() if k != "rounds_completed"} for m in reported]
    results = [tune_result(reported, "t1"), tune_result(older, "t0")]  # t0: an older search
    rows = collect_rows(results, cfg, tmp_path, "acc_weighted", "max")
    assert [(r.status, r.rounds, r.final_round) for r in rows] == [("stopped", 2, 1)] * 2

    cut = tmp_path / "runs" / "t0"  # t1's folder as a thread cut short (mid-drawing) leaves it
    skip = shutil.ignore_patterns("summary.json", "client_accuracy_vs_*")
    shutil.copytree(run_dir, cut, ignore=skip)
    close_stopped_runs(rows, cfg.rounds)
    assert json.loads((cut / "summary.json").read_text()) == summary
    assert {p.name for p in (cut / "plots").glob("*.png")} == set(REPORT_PLOTS)
