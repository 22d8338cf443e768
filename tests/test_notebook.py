"""notebooks/analysis.ipynb runs top to bottom on small run folders (nbclient), under the
pandas that ``make`` installs: two settings of one run each (their mean alone, never NaN),
a second seed of one of them (mean ± std), and a run that ended before its first round
(no summary.json, no client rows) listed but left out."""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

# the shared run folders (conftest.py's ``runs``) are built once in one xdist process
pytestmark = pytest.mark.xdist_group("tracking_runs")

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "analysis.ipynb"


def second_seed(run_dir: Path, out: Path, gain: float) -> Path:
    """A copy of ``run_dir`` as if run with seed 1 (the same setting), ``gain`` better."""
    shutil.copytree(run_dir, out, ignore=shutil.ignore_patterns("wandb", "plots"))
    config = yaml.safe_load((out / "config.yaml").read_text())
    (out / "config.yaml").write_text(yaml.safe_dump({**config, "seed": 1}, sort_keys=False))
    summary = json.loads((out / "summary.json").read_text())
    for which in ("best", "final"):
        summary[which]["acc_weighted"] += gain
    (out / "summary.json").write_text(json.dumps(summary))
    return out


def as_language_model(run_dir: Path, out: Path) -> Path:
    """A copy of ``run_dir`` (seed 2) whose rounds record a perplexity, as a next-token run's do
    (the numbers are exp of its loss; only the notebook's perplexity figure reads them)."""
    second_seed(run_dir, out, gain=0.0)
    config = yaml.safe_load((out / "config.yaml").read_text())
    (out / "config.yaml").write_text(yaml.safe_dump({**config, "seed": 2}, sort_keys=False))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        if "loss" in row:
            row["perplexity"] = math.exp(row["loss"])
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def ended_early(run_dir: Path, out: Path) -> Path:
    """What a run that raised in round 0 left before fedsim wrote a summary for it."""
    out.mkdir()
    for name in ("config.yaml", "partition.json"):
        shutil.copy(run_dir / name, out / name)
    (out / "metrics.jsonl").write_text("")
    return out


def execute(notebook: Any) -> Any:
    """Run every cell (CellExecutionError on a failing one). A cell's printed output may
    reach the client after the cell's reply: nbclient waits 4 s for it by default and then
    drops it silently; here it waits up to 60 s and fails rather than drop it. Twice in ~10
    CI runs on a loaded machine the line of a cell that always prints was still missing from
    what the test read, with no timeout. If such a cell comes back with no printed text at
    all, the kernel's message was lost, not the notebook's result: the notebook runs once
    more, and that run is the one the test reads (a wrong line still fails)."""
    source = copy.deepcopy(notebook)
    for attempt in (1, 2):
        notebook = copy.deepcopy(source)
        nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3", iopub_timeout=60,
                                raise_on_iopub_timeout=True,
                                resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
        lost = silent_printing_cells(notebook)
        if not lost:
            break
        print(f"run {attempt}: cells {lost} print at top level but came back with no output")
    return notebook


def silent_printing_cells(notebook: Any) -> list[int]:
    """Code cells with a top-level (always run) print whose outputs hold no printed text."""
    return [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        and any(line.startswith("print(") for line in cell.source.splitlines())
        and not any(output.get("output_type") == "stream" for output in cell.get("outputs", []))
    ]


def outputs(notebook, needle: str | None = None) -> str:
    """The text of every code cell's outputs (of the cells whose source holds ``needle``)."""
    return "\n".join(
        str(output.get("text", "")) + str(output.get("data", {}).get("text/plain", ""))
        for cell in notebook.cells
        if cell.cell_type == "code" and (needle is None or needle in cell.source)
        for output in cell.get("outputs", [])
    )


@pytest.mark.slow
def test_analysis_notebook_executes_and_compares_runs(runs, tmp_path, monkeypatch):
    folders = [
        *runs.values(),
        second_seed(runs["fedavg"], tmp_path / "tiny-fedavg-seed1", gain=0.02),
        as_language_model(runs["fedavg"], tmp_path / "tiny-fedavg-seed2"),
        ended_early(runs["fedavg"], tmp_path / "tiny-ended-early"),
    ]
    monkeypatch.setenv("FEDSIM_RUNS", os.pathsep.join(str(p) for p in folders))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # inline figures in the kernel
    notebook = execute(nbformat.read(NOTEBOOK, as_version=4))
    text = outputs(notebook)
    assert "5 run folder(s)" in text
    for name in ("tiny-fedavg", "tiny-cwfedavg", "tiny-ended-early"):
        assert name in text
    comparison = outputs(notebook, "comparison = ")
    assert "left out (did not complete): ['tiny-ended-early']" in comparison
    assert "nan" not in comparison.lower(), comparison
    one_run = json.loads((runs["cwfedavg"] / "summary.json").read_text())["best"]
    assert f"{one_run['acc_weighted']:.4f}" in comparison  # its mean alone
    assert comparison.count("±") >= 5, comparison  # fedavg's two seeds: every column
    rows = [line for line in text.splitlines() if line.startswith("no client rows")]
    assert rows == ["no client rows: ['tiny-ended-early']"], outputs(notebook, "no client rows")
    hurt = outputs(notebook, "clients_hurt(")  # against the first run with client rows
    assert hurt.count("% within noise") == 3 and "(final round)" in hurt, hurt  # each other run
    assert "runs with a clock: none" in text  # these runs have no clock: against rounds
    assert "runs with perplexity: 1" in outputs(notebook, "lm_runs = ")
    images = sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )
    assert images >= 6  # curves, perplexity, boxplot, classes scatter, client curves, row norms


@pytest.mark.slow
def test_every_panel_reads_fedsim_metric(runs, tmp_path, monkeypatch):
    """FEDSIM_METRIC=perplexity: the per-client panels draw the clients' perplexity, and the
    perplexity figure has no panel for held-out clients the runs do not have."""
    import csv

    run = as_language_model(runs["fedavg"], tmp_path / "tiny-lm")
    with (run / "clients.csv").open() as file:
        rows = list(csv.DictReader(file))
    for row in rows:
        row["perplexity"] = math.exp(float(row["loss"]))
    with (run / "clients.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summary = json.loads((run / "summary.json").read_text())
    for which in ("best", "final"):
        summary[which]["perplexity"] = math.exp(summary[which]["loss"])
    (run / "summary.json").write_text(json.dumps(summary))
    monkeypatch.setenv("FEDSIM_RUNS", str(run))
    monkeypatch.setenv("FEDSIM_METRIC", "perplexity")
    notebook = execute(nbformat.read(NOTEBOOK, as_version=4))
    text = outputs(notebook)
    assert "per-client panels: perplexity of ['tiny-lm']" in text
    assert "perplexity panels: trained clients (test)\n" in text  # no empty held-out panel
