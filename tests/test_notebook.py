"""notebooks/analysis.ipynb runs top to bottom on two small run folders (nbclient)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tracking_runs import tiny_runs

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "analysis.ipynb"


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return tiny_runs(tmp_path_factory.mktemp("tracking_runs"))


@pytest.mark.slow
def test_analysis_notebook_executes_and_compares_runs(runs, monkeypatch):
    monkeypatch.setenv("FEDSIM_RUNS", os.pathsep.join(str(p) for p in runs.values()))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # inline figures in the kernel
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=180,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # raises CellExecutionError on any failing cell
    text = "\n".join(
        str(output.get("text", "")) + str(output.get("data", {}).get("text/plain", ""))
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )
    assert "2 run folder(s)" in text
    for name in ("tiny-fedavg", "tiny-cwfedavg"):
        assert name in text
    images = sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )
    assert images >= 5  # curves, boxplot, classes scatter, client curves, row norms
