"""Figures handed over as ``fedsim.figures`` specs, drawn into ``<run_dir>/plots/``.

An algorithm says what it wants drawn from its state (``Algorithm.figures``: cwFedAvg's
row-norm heatmap, ...); this module draws heatmaps and line series with matplotlib (Agg
backend) and knows nothing about the algorithm or the simulation that made them.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.figures import Figure, Panel


def figure_context(run_name: str, algorithm: str, round_idx: int) -> str:
    """What the run is, in front of every figure's title: ``name: algorithm, round N``."""
    return f"{run_name}: {algorithm}, round {round_idx}"


def _draw_heatmap(fig: Any, ax: Any, panel: Panel) -> None:
    rows, columns = panel.values.shape
    # each panel on its own scale (cwFedAvg's row norms are rarely as peaked as p_i)
    image = ax.imshow(panel.values, aspect="auto", cmap="viridis", vmin=0.0)
    fig.colorbar(image, ax=ax, shrink=0.8)
    if columns <= 20:
        ax.set_xticks(range(columns))
    if rows <= 40:
        ax.set_yticks(range(rows))


def _draw_lines(ax: Any, panel: Panel) -> None:
    points = panel.values.shape[1]
    x = np.arange(points) if panel.x is None else np.asarray(panel.x)
    labels = panel.labels or (None,) * panel.values.shape[0]
    colors = [f"C{g % 10}" for g in panel.groups] or [None] * panel.values.shape[0]
    for row, label, color in zip(panel.values, labels, colors, strict=True):
        ax.plot(x, row, marker="o" if points <= 30 else None, ms=3, label=label, color=color)
    if panel.labels:
        ax.legend(fontsize=6)
    ax.grid(alpha=0.3)


def _panel_size(panel: Panel) -> tuple[float, float]:
    """(width, height) in inches a panel asks for (heatmaps grow with their cells)."""
    rows, columns = panel.values.shape
    if panel.kind == "heatmap":
        return 0.45 * columns, 1.5 + 0.25 * rows
    return 4.5, 4.0


def write_figure(path: Path, figure: Figure, context: str = "") -> Path:
    """Draw ``figure``'s panels side by side under ``context  title``; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [_panel_size(p) for p in figure.panels]
    width = 3 + sum(w for w, _ in sizes)
    height = max(h for _, h in sizes)
    fig, axes = plt.subplots(1, len(figure.panels), figsize=(width, height), squeeze=False)
    for ax, panel in zip(axes[0], figure.panels, strict=True):
        if panel.kind == "heatmap":
            _draw_heatmap(fig, ax, panel)
        else:
            _draw_lines(ax, panel)
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.tick_params(labelsize=6)
    title = textwrap.fill(f"{context}  {figure.title}".strip(), width=int(11 * width))
    fig.suptitle(title, fontsize=10)  # wrapped: a long title no longer runs off the figure
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_figures(plots_dir: Path, figures: list[Figure], context: str = "") -> list[Path]:
    """Each figure as ``plots_dir/<filename>``; returns those written.

    A drawing error is printed, never raised: the run's results are already saved.
    """
    written = []
    for figure in figures:
        try:
            written.append(write_figure(Path(plots_dir) / figure.filename, figure, context))
        except Exception as err:  # noqa: BLE001 - plots must not fail a finished run
            print(
                f"fedsim: figure {figure.filename} failed: {err.__class__.__name__}: {err}",
                file=sys.stderr,
            )
    return written
