"""``fedsim report RUN_DIR``: the standard plots of a run folder, as PNGs in ``RUN_DIR/plots/``.

Everything is derived from the run folder's files (metrics.jsonl, clients.csv,
partition.json, config.yaml), so a report can be redrawn at any time:

- ``accuracy_curves.png``: sample-weighted, unweighted mean (+- std) and worst-10% accuracy;
- ``client_accuracy_distribution.png``: per-round spread of client accuracies (percentiles);
- ``client_accuracy_vs_classes.png``: final per-client accuracy vs classes the client holds;
- ``client_accuracy_vs_samples.png``: final per-client accuracy vs its training samples;
- ``label_distribution.png``: the training labels of each client (``label_plot.py``);
- ``accuracy_vs_sim_time.png`` (runs that log ``sim_time``: asynchronous rounds, or
  any ``system.*`` key set): accuracy against simulated time;
- ``perplexity.png`` (next-token prediction): perplexity per round, overall and per client;
- ``scheduled_values.png`` (a value given as a schedule): each such value per round above the
  metric it produced (``schedule_plot.py``).

An algorithm's own figures (cwFedAvg's ``row_norms.png``...), drawn at the end of a run from
its final state and redrawn by ``fedsim report`` from a final checkpoint, are the other PNGs
in ``plots/``; they are listed alongside.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

# CLIENT_COLUMNS and load_run stay importable from here (older code, tests)
from fedsim.tracking.label_plot import plot_label_distribution
from fedsim.tracking.perplexity_plot import PERPLEXITY_PLOT, has_perplexity, plot_perplexity
from fedsim.tracking.run_data import CLIENT_COLUMNS, RunData, is_number, load_run  # noqa: F401
from fedsim.tracking.schedule_plot import SCHEDULES_PLOT, plot_scheduled_values, scheduled_keys

ACCURACY_CURVES = "accuracy_curves.png"
CLIENT_DISTRIBUTION = "client_accuracy_distribution.png"
VS_CLASSES = "client_accuracy_vs_classes.png"
VS_SAMPLES = "client_accuracy_vs_samples.png"
LABEL_DISTRIBUTION = "label_distribution.png"
REPORT_PLOTS = (ACCURACY_CURVES, CLIENT_DISTRIBUTION, VS_CLASSES, VS_SAMPLES, LABEL_DISTRIBUTION)
VS_SIM_TIME = "accuracy_vs_sim_time.png"  # only for runs that log sim_time
SEEN_VS_UNSEEN = "seen_vs_unseen.png"  # runs with held-out clients or eval.model=both


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _integer_ticks(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def save_figure(fig: Any, path: Path) -> Path:
    """Save as PNG under a temporary name, then rename: a drawing cut short (a Tune trial's
    thread ended) leaves no half-written plot."""
    for ax in fig.axes:
        if ax.get_xlabel() == "round":
            _integer_ticks(ax.xaxis)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    part = path.with_name(path.name + ".part")
    fig.savefig(part, dpi=100, format="png")
    os.replace(part, path)
    pyplot().close(fig)
    return path


def _save_accuracy_axes(
    fig: Any, ax: Any, path: Path, xlabel: str, ylabel: str, title: str
) -> Path:
    """Labels, a 0-1 accuracy axis, grid, legend and title; then save the figure."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[1]:  # nothing drawn (no readable rows): no legend
        ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title, fontsize=10)
    return save_figure(fig, path)


def plot_accuracy_curves(run: RunData, path: Path) -> Path:
    """Weighted, mean (+- std band) and worst-10% accuracy per evaluated round."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    rounds, mean = run.series("acc_mean")
    _, std = run.series("acc_std")
    for key, label in (
        ("acc_weighted", "weighted"),
        ("acc_mean", "mean over clients"),
        ("acc_worst10", "worst 10%"),
    ):
        x, y = run.series(key)
        ax.plot(x, y, marker="o" if len(x) <= 30 else None, ms=3, label=label)
    if len(rounds) and len(std) == len(mean):
        ax.fill_between(rounds, mean - std, mean + std, alpha=0.15, label="mean +- std")
    return _save_accuracy_axes(fig, ax, path, "round", "test accuracy", run.label)


def plot_accuracy_vs_sim_time(run: RunData, path: Path) -> Path:
    """Weighted and worst-10% accuracy of each evaluated round against its ``sim_time``: the
    virtual time at which the server held the model that round evaluates."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for key, label in (("acc_weighted", "weighted"), ("acc_worst10", "worst 10%")):
        rows = [m for m in run.metrics if is_number(m.get(key)) and is_number(m.get("sim_time"))]
        x = [m["sim_time"] for m in rows]
        ax.plot(x, [m[key] for m in rows], marker="o" if len(x) <= 30 else None, ms=3, label=label)
    return _save_accuracy_axes(
        fig,
        ax,
        path,
        "virtual time (s; 1 = one sample trained at system.time_per_sample=1)",
        "test accuracy",
        f"{run.label}: accuracy vs simulated time",
    )


def plot_seen_vs_unseen(run: RunData, path: Path) -> Path:
    """The training clients' accuracy beside the held-out clients' (``unseen/*``; the gap
    between them is ``participation_gap``) and the global model's (``global/*``), per
    evaluated round."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    lines = (
        ("acc_weighted", "trained clients, weighted", "-"),
        ("acc_worst10", "trained clients, worst 10%", ":"),
        ("unseen/acc_weighted", "held-out clients, weighted", "-"),
        ("unseen/acc_worst10", "held-out clients, worst 10%", ":"),
        ("global/acc_weighted", "global model, trained clients", "--"),
    )
    for key, label, style in lines:
        x, y = run.series(key)
        if len(x):
            ax.plot(x, y, style, marker="o" if len(x) <= 30 else None, ms=3, label=label)
    return _save_accuracy_axes(
        fig, ax, path, "round", "test accuracy", f"{run.label}: seen vs unseen clients"
    )


def plot_client_distribution(run: RunData, path: Path) -> Path:
    """Percentile bands (min-max, 10-90, 25-75) and median of client accuracies per round."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    if len(run.clients.get("round", [])):
        rounds = np.unique(run.clients["round"])
        per_round = [run.clients["accuracy"][run.clients["round"] == r] for r in rounds]
        pct = np.array([np.percentile(a, [0, 10, 25, 50, 75, 90, 100]) for a in per_round])
        for (lo, hi), alpha, label in (
            ((0, 6), 0.12, "min-max"),
            ((1, 5), 0.2, "10-90%"),
            ((2, 4), 0.3, "25-75%"),
        ):
            ax.fill_between(rounds, pct[:, lo], pct[:, hi], alpha=alpha, color="C0", label=label)
        ax.plot(rounds, pct[:, 3], color="C0", label="median")
    return _save_accuracy_axes(
        fig, ax, path, "round", "client test accuracy", f"{run.label}: per-client accuracy"
    )


def train_samples(run: RunData, clients: np.ndarray) -> np.ndarray:
    """Training samples of each client (partition.json), or its test samples if absent."""
    sizes = {c["client"]: c["train"] for c in run.partition.get("clients", [])}
    return np.array([sizes.get(int(c), np.nan) for c in clients], dtype=float)


def plot_final_vs(run: RunData, path: Path, by: str) -> Path:
    """Final per-client accuracy against ``classes`` or training ``samples``, with trend."""
    plt = pyplot()
    final = run.final_clients()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    accuracy = final.get("accuracy", np.array([]))
    if by == "classes":
        x = final.get("classes", np.array([])).astype(float)
        rng = np.random.default_rng(0)
        ax.scatter(x + rng.uniform(-0.15, 0.15, len(x)), accuracy, s=14, alpha=0.6)
        for value in np.unique(x):
            ax.plot(value, accuracy[x == value].mean(), "k_", ms=18, mew=2)
        if len(x):
            ax.set_xlim(x.min() - 0.6, x.max() + 0.6)
            ax.set_xticks(np.arange(int(x.min()), int(x.max()) + 1))
        ax.set_xlabel("classes in the client's training data (black: mean)")
    else:
        x = train_samples(run, final.get("client", np.array([], dtype=int)))
        ax.scatter(x, accuracy, s=14, alpha=0.6)
        ok = np.isfinite(x)
        if ok.sum() >= 2 and np.ptp(x[ok]) > 0:
            slope, intercept = np.polyfit(x[ok], accuracy[ok], 1)
            grid = np.linspace(x[ok].min(), x[ok].max(), 2)
            ax.plot(grid, slope * grid + intercept, "k--", lw=1, label="linear fit")
            ax.legend(fontsize=8, loc="lower right")
        ax.set_xlabel("training samples of the client")
    last = int(final["round"].max()) if len(final.get("round", [])) else 0
    ax.set_ylabel(f"test accuracy at round {last}")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(f"{run.label}: final per-client accuracy", fontsize=10)
    return save_figure(fig, path)


def write_report(run_dir: str | Path, run: RunData | None = None) -> list[Path]:
    """Every report plot into ``run_dir/plots/``; returns them plus existing algorithm figures.
    What could not be read is named on stderr, one line per file and reason (the plots show
    the rest); a warning while drawing (matplotlib's) is one ``fedsim: warning:`` line too."""
    run = load_run(run_dir) if run is None else run  # ``run``: read already (``load_run``)
    for problem in run.problems:
        print(f"fedsim: warning: {problem}", file=sys.stderr)
    plots = run.run_dir / "plots"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        written = [
            plot_accuracy_curves(run, plots / ACCURACY_CURVES),
            plot_client_distribution(run, plots / CLIENT_DISTRIBUTION),
            plot_final_vs(run, plots / VS_SAMPLES, "samples"),
        ]
        if not has_perplexity(run):  # next-token prediction has no classes ("1 classes")
            written[2:2] = [plot_final_vs(run, plots / VS_CLASSES, "classes")]
            written.append(save_figure(
                plot_label_distribution(pyplot(), run.partition, run.label),
                plots / LABEL_DISTRIBUTION,
            ))  # fmt: skip
        if any("sim_time" in m for m in run.metrics):
            written.append(plot_accuracy_vs_sim_time(run, plots / VS_SIM_TIME))
        if any("unseen/acc_weighted" in m or "global/acc_weighted" in m for m in run.metrics):
            written.append(plot_seen_vs_unseen(run, plots / SEEN_VS_UNSEEN))
        if has_perplexity(run):
            written.append(plot_perplexity(run, plots / PERPLEXITY_PLOT, pyplot(), save_figure))
        if scheduled_keys(run):  # a value given as a schedule, beside what it produced
            written.append(plot_scheduled_values(run, plots / SCHEDULES_PLOT, pyplot(),
                                                 save_figure))  # fmt: skip
    for message in dict.fromkeys(" ".join(str(w.message).split()) for w in caught):
        print(f"fedsim: warning: plots of {run.run_dir}: {message}", file=sys.stderr)
    drawn = (*REPORT_PLOTS, VS_SIM_TIME, SEEN_VS_UNSEEN, PERPLEXITY_PLOT, SCHEDULES_PLOT)
    written += sorted(p for p in plots.glob("*.png") if p.name not in drawn)
    return written
