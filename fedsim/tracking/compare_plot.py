"""``fedsim report RUN_DIR... --compare PATH``: several runs' accuracy (perplexity, for runs
that predict tokens) on one time axis.

Runs that log ``sim_time`` (asynchronous rounds, or any ``system.*`` key set) are drawn
against virtual time, so a synchronous run that waits for slow clients and one that
over-selects, or an asynchronous one, compare by when they reach an accuracy; a run without
a clock is drawn against rounds on a second panel (the two axes are not comparable).
``time_panels`` gives the curves as plain data (the analysis notebook draws them itself).
"""

from __future__ import annotations

from pathlib import Path

from fedsim.tracking.perplexity_plot import has_perplexity
from fedsim.tracking.report import pyplot, save_figure
from fedsim.tracking.run_data import RunData, is_number

Curve = tuple[str, list[float], list[float]]  # (label, x, accuracy)


def time_panels(runs: list[RunData], key: str = "acc_weighted") -> list[tuple[str, list[Curve]]]:
    """[(x-axis label, curves)]: the runs with a clock against virtual time, then the runs
    without one against rounds (a panel only where there is a run for it)."""
    timed = [r for r in runs if any(is_number(m.get("sim_time")) for m in r.metrics)]
    panels = []
    for group, x_key, xlabel in (
        (timed, "sim_time", "virtual time (s)"),
        ([r for r in runs if r not in timed], "round", "round"),
    ):
        curves = []
        for run in group:
            rows = [m for m in run.metrics if is_number(m.get(key)) and is_number(m.get(x_key))]
            curves.append((run.label, [m[x_key] for m in rows], [m[key] for m in rows]))
        if curves:
            panels.append((xlabel, curves))
    return panels


def plot_accuracy_vs_time(runs: list[RunData], path: Path, key: str = "acc_weighted") -> Path:
    """``time_panels`` side by side, saved to ``path``; runs that all predict tokens are
    drawn by their perplexity (log scale) instead of their next-token accuracy."""
    tokens = bool(runs) and all(has_perplexity(r) for r in runs)
    key = "perplexity" if tokens else key
    panels = time_panels(runs, key)
    plt = pyplot()
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(6.4 * max(1, len(panels)), 4),
                             squeeze=False)  # fmt: skip
    for ax, (xlabel, curves) in zip(axes[0], panels, strict=False):
        for label, x, y in curves:
            ax.plot(x, y, marker="o" if len(x) <= 30 else None, ms=3, label=label)
        ax.set_xlabel(xlabel)
        if tokens:
            ax.set_ylabel("test perplexity (all tokens)")
            ax.set_yscale("log")
        else:
            ax.set_ylabel(f"test accuracy ({key})")
            ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right" if tokens else "lower right", fontsize=8)
        ax.set_title(f"{'perplexity' if tokens else 'accuracy'} vs {xlabel}", fontsize=10)
    return save_figure(fig, path)
