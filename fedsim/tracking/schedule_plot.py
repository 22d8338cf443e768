"""``scheduled_values.png`` in ``fedsim report``: each value the run changed over rounds (a key
given as a schedule: ``algorithm.mu``, ``client.clip_grad_norm``, the learning rate ``lr``),
round by round as ``metrics.jsonl`` recorded it, above the metric it produced (perplexity
for next-token prediction, else accuracy) on the same rounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedsim.tracking.perplexity_plot import has_perplexity

SCHEDULES_PLOT = "scheduled_values.png"
SCHEDULED_SECTIONS = ("client.", "algorithm.")  # where schedulable keys live (dotted names)


def scheduled_keys(run: Any) -> list[str]:
    """The values ``run`` (a ``RunData``) recorded per round that change: its dotted
    schedulable keys, and ``lr`` when it is not constant."""
    keys: dict[str, None] = {}
    for record in run.metrics:
        for key in record:
            if key == "lr" or key.startswith(SCHEDULED_SECTIONS):
                keys.setdefault(key)
    changing = []
    for key in keys:
        _, values = run.series(key)
        if len(values) and (key != "lr" or values.min() != values.max()):
            changing.append(key)
    return changing


def plot_scheduled_values(run: Any, path: Path, pyplot: Any, save: Any) -> Path:
    """One panel per scheduled value, then the run's own metric, sharing the round axis."""
    from matplotlib.ticker import MaxNLocator

    keys = scheduled_keys(run)
    metric, label = (
        ("perplexity", "perplexity") if has_perplexity(run) else ("acc_weighted", "accuracy")
    )
    fig, axes = pyplot.subplots(len(keys) + 1, 1, sharex=True,
                                figsize=(6.4, 1.8 * (len(keys) + 1) + 0.6))  # fmt: skip
    for ax, key in zip(axes, keys, strict=False):
        rounds, values = run.series(key)
        ax.step(rounds, values, where="post", marker=".", color="C1")
        ax.set_ylabel(key, fontsize=8)
        ax.grid(alpha=0.3)
    rounds, values = run.series(metric)
    axes[-1].plot(rounds, values, marker=".", color="C0")
    if metric == "perplexity":
        axes[-1].set_yscale("log")
    axes[-1].set_ylabel(label, fontsize=8)
    axes[-1].set_xlabel("round")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1].grid(alpha=0.3)
    axes[0].set_title(f"{run.label}: values over rounds and the {label} they gave", fontsize=9)
    return save(fig, path)
