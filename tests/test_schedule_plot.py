"""``fedsim report``'s scheduled_values.png: drawn for a run with a value given as a schedule
(each such value per round above the metric it gave), not for a run without one."""

from __future__ import annotations

import json
import shutil

import pytest

from fedsim.tracking.report import load_run, write_report
from fedsim.tracking.schedule_plot import SCHEDULES_PLOT, scheduled_keys

pytestmark = pytest.mark.xdist_group("tracking_runs")  # conftest.py's shared ``runs``


def test_scheduled_values_are_drawn_only_where_they_change(runs, tmp_path):
    plain = tmp_path / "plain"
    shutil.copytree(runs["fedavg"], plain)
    assert scheduled_keys(load_run(plain)) == []  # a constant lr is no schedule
    assert not (plain / "plots" / SCHEDULES_PLOT).exists()
    write_report(plain)
    assert not (plain / "plots" / SCHEDULES_PLOT).exists()

    scheduled = tmp_path / "scheduled"
    shutil.copytree(runs["fedavg"], scheduled)
    path = scheduled / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:  # as a run with algorithm.mu and client.lr as schedules records
        record["algorithm.mu"] = 0.1 * 0.5 ** record["round"]
        record["lr"] = 0.05 / (1 + record["round"])
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    run = load_run(scheduled)
    assert sorted(scheduled_keys(run)) == ["algorithm.mu", "lr"]
    written = write_report(scheduled)
    assert scheduled / "plots" / SCHEDULES_PLOT in written
    assert (scheduled / "plots" / SCHEDULES_PLOT).read_bytes().startswith(b"\x89PNG")
