"""Cluster jobs: ``ray_jobs.reproduce`` as a job joining the test session's Ray cluster.

The cluster is conftest's ``ray_address`` (one per test session, 2 CPUs, loopback): the job
runs in a subprocess and joins it through ``RAY_ADDRESS``, like a job on a real cluster.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import NARROW_CNN

import ray_jobs.run_experiment as run_experiment_job
from ray_jobs.reproduce import COLUMNS, RunSpec, aggregate, main, markdown_table

REPO = Path(__file__).resolve().parents[1]


def job_env(address: str) -> dict[str, str]:
    return {
        **os.environ,
        "RAY_ADDRESS": address,
        "RAY_AUTH_MODE": "disabled",
        "WANDB_MODE": "offline",
    }


@pytest.mark.slow
def test_reproduce_configs_x_seeds_on_a_cluster(ray_address, tmp_path):
    local = yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())
    local.update(name="quick-local", algorithm={"name": "local"})
    local_yaml = tmp_path / "quick-local.yaml"
    local_yaml.write_text(yaml.safe_dump(local))
    out = tmp_path / "repro"
    command = [
        sys.executable, "-m", "ray_jobs.reproduce", "configs/quickstart.yaml", str(local_yaml),
        "--seeds", "0", "1", "--out", str(out), "--max-concurrent", "1",
        "rounds=1", "data.num_clients=4", "join_ratio=0.5", "data.partition.name=pathological",
        *NARROW_CNN,  # the narrow FedAvgCNN: the job's table is the same for any net
    ]  # fmt: skip
    proc = subprocess.run(
        command, cwd=REPO, env=job_env(ray_address), capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "| quickstart (fedavg) | 2 |" in proc.stdout
    assert "| quick-local (local) | 2 |" in proc.stdout

    with open(out / "runs.csv") as handle:
        runs = list(csv.DictReader(handle))
    assert [(Path(r["config"]).stem, r["seed"]) for r in runs] == [
        ("quickstart", "0"), ("quickstart", "1"), ("quick-local", "0"), ("quick-local", "1"),
    ]  # fmt: skip
    assert not any(r["error"] for r in runs)
    assert all(float(r["cpu_s"]) > 0 for r in runs)  # each run's process CPU time
    with open(out / "results.csv") as handle:
        results = list(csv.DictReader(handle))
    assert [r["label"] for r in results] == ["quickstart (fedavg)", "quick-local (local)"]
    for result in results:
        stem = Path(result["config"]).stem
        finals = [
            json.loads((out / "runs" / f"{stem}-seed{s}" / "summary.json").read_text())["final"]
            for s in (0, 1)
        ]
        values = [f["acc_weighted"] for f in finals]
        assert float(result["final_acc_weighted_mean"]) == pytest.approx(np.mean(values))
        assert float(result["final_acc_weighted_std"]) == pytest.approx(np.std(values, ddof=1))
        assert result["seeds"] == "2"
    table = (out / "results.md").read_text()
    assert table.count("±") == 2 * len(COLUMNS)


def test_mean_std_table_by_hand():
    specs = [RunSpec("a.yaml", "a (fedavg)", s, {}, f"runs/a-{s}") for s in (0, 1)]
    specs.append(RunSpec("b.yaml", "b (local)", 0, {}, "runs/b-0"))

    def summary(acc: float) -> dict:
        row = {"acc_weighted": acc, "acc_mean": acc, "acc_worst10": acc / 2}
        return {"best": row, "final": row}

    specs.append(RunSpec("c.yaml", "c (fedper)", 0, {}, "runs/c-0"))
    rows = aggregate(specs, [summary(0.8), summary(0.9), None, summary(0.7)])
    assert rows[0]["seeds"] == 2 and rows[0]["final_acc_weighted_mean"] == pytest.approx(0.85)
    # sample std (ddof 1): sqrt(((0.8 - 0.85)^2 + (0.9 - 0.85)^2) / 1) = 0.05 * sqrt(2)
    assert rows[0]["final_acc_weighted_std"] == pytest.approx(0.0707106781)
    assert rows[1]["seeds"] == 0
    assert rows[2]["final_acc_weighted_mean"] == 0.7 and np.isnan(rows[2]["final_acc_weighted_std"])
    table = markdown_table(rows)
    assert "| a (fedavg) | 2 | 85.00 ± 7.07 |" in table and "| b (local) | 0 | n/a |" in table
    assert "| c (fedper) | 1 | 70.00 |" in table  # one seed: no std


def test_reproduce_bad_config_exits_2_before_ray(tmp_path, capsys):
    assert main(["configs/quickstart.yaml", "rounds=0", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err == "reproduce: error: rounds=0: must be >= 1\n"
    assert not (tmp_path / "r").exists()


def test_run_experiment_job_uses_the_jobs_cluster(monkeypatch):
    seen = []
    monkeypatch.setattr(run_experiment_job, "main", lambda argv: seen.append(argv) or 0)
    assert run_experiment_job.run(["configs/quickstart.yaml", "rounds=3", "--out", "x"]) == 0
    assert seen == [
        ["run", "configs/quickstart.yaml", "runtime.executor=ray", "runtime.address=auto",
         "rounds=3", "--out", "x"]
    ]  # fmt: skip
    assert run_experiment_job.run([]) == 2
