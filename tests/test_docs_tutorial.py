"""The student's path, executed: docs/tutorials/compare-personalization.md, top to bottom.

The page is run as one bash script (``docs_snippets.page_script``) in an empty folder: its
files are written, its commands run. Only the size changes: every ``fedsim run`` and
``ray_jobs`` command gets 2 rounds, 4 clients and a 600-image subset of the page's 5,000
digits, and ``ray_jobs.reproduce`` gets ``--max-concurrent 1``: its six runs take turns in
one Ray task worker (each worker started costs ~10 CPU-s of torch and Lightning imports; as
many runs at once as fit started five). It joins the test session's Ray cluster
(``RAY_ADDRESS``), as a job joins a real one, so no extra cluster starts. Then: the 3-seed
table has both methods, each run's W&B offline record holds per-client accuracy, and the
globs the page hands to ``wandb sync`` and the notebook find the runs.
"""

from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs_snippets import REPO, blocks, commands, page_script

from fedsim.tracking.wandb_offline import read_offline_run

PAGE = REPO / "docs" / "tutorials" / "compare-personalization.md"
SMALL = {"rounds": "2", "data.num_clients": "4", "data.max_samples": "600"}
# the page puts the reader's folder on the path; keep the tree under test importable too
KEEP_PATH = {'export PYTHONPATH="$PWD"': 'export PYTHONPATH="$PWD:$PYTHONPATH"'}


def one_run_at_a_time() -> dict[str, str]:
    """The page's ``ray_jobs.reproduce`` command, with ``--max-concurrent 1``."""
    return {
        command: f"{command} --max-concurrent 1"
        for block in blocks(PAGE)
        if block.language == "bash"
        for command in commands(block.text)
        if "ray_jobs.reproduce" in command
    }


@pytest.mark.slow
def test_the_tutorial_runs_as_written(ray_address, tmp_path):
    script = page_script(PAGE, SMALL, {**KEEP_PATH, **one_run_at_a_time()})
    assert script.count("ray_jobs.reproduce") == 2  # echoed, then run
    assert script.count("--max-concurrent 1") == 2
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "RAY_ADDRESS": ray_address,
        "RAY_AUTH_MODE": "disabled",
        "WANDB_MODE": "offline",
        # `python` and `fedsim` are this environment's, as in the reader's activated venv
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }
    proc = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=540,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    # the 3-seed table: both methods, every seed done, mean ± std
    with open(tmp_path / "runs" / "compare" / "results.csv") as handle:
        rows = {row["label"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"fedper (fedper)", "ditto (ditto)"}
    assert all(row["seeds"] == "3" for row in rows.values())
    table = (tmp_path / "runs" / "compare" / "results.md").read_text()
    assert table.count("±") == 2 * 4 and "fedper (fedper) | 3 |" in table
    assert "final acc_mean" in proc.stdout  # the page's own reading of results.csv

    # per-client accuracy in W&B (offline), for every run
    run_dirs = sorted((tmp_path / "runs" / "compare" / "runs").iterdir())
    assert [d.name for d in run_dirs] == sorted(
        f"{m}-seed{s}" for m in ("fedper", "ditto") for s in range(3)
    )
    for run_dir in run_dirs:
        wb = read_offline_run(run_dir)
        assert wb.charts["clients/accuracy"]["panel_config"]["panelDefId"] == (
            "wandb/lineseries/v0"
        ), run_dir  # one line per client
        final = wb.history[-1]["clients/accuracy_distribution"]
        assert sum(final["values"]) == 4, run_dir  # every client's accuracy, last round

    # what the page hands to `wandb sync` and to the notebook finds those runs
    for block in blocks(PAGE):
        if block.language != "console":
            continue
        for word in block.text.replace('"', " ").split():
            if "*" in word:
                pattern = word.split("=", 1)[-1].replace("$PWD/", "")
                assert len(glob.glob(str(tmp_path / pattern))) == 6, (block.where, word)
