"""``perplexity.png`` of ``fedsim report`` (runs of next-token prediction only): the
perplexity of every client's tokens together per round (trained clients, held-out ones, the
global model), and the spread of the clients' own perplexities, on a log axis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

PERPLEXITY_PLOT = "perplexity.png"
LINES = (
    ("perplexity", "trained clients, all tokens", "-"),
    ("unseen/perplexity", "held-out clients, all tokens", "--"),
    ("global/perplexity", "global model, trained clients", ":"),
)


def has_perplexity(run: Any) -> bool:
    """Whether the run (a ``RunData``) logged perplexities."""
    return any("perplexity" in m for m in run.metrics)


def plot_perplexity(run: Any, path: Path, pyplot: Any, save: Any) -> Path:
    """Per-round perplexities of ``run`` (a ``RunData``) and the 10-90% band and median of
    the trained clients' own, drawn with ``pyplot`` and written by ``save(fig, path)``."""
    fig, ax = pyplot.subplots(figsize=(6.4, 4))
    for key, label, style in LINES:
        rounds, values = run.series(key)
        if len(rounds):
            ax.plot(rounds, values, style, color="C1", label=label)
    clients = run.clients
    if len(clients.get("perplexity", [])):
        rounds = np.unique(clients["round"])
        per_round = [clients["perplexity"][clients["round"] == r] for r in rounds]
        bands = np.array([np.nanpercentile(v, [10, 50, 90]) for v in per_round])
        ax.fill_between(rounds, bands[:, 0], bands[:, 2], alpha=0.2, color="C0",
                        label="clients, 10-90%")  # fmt: skip
        ax.plot(rounds, bands[:, 1], color="C0", label="clients, median")
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("test perplexity (exp of the loss per token)")
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax.set_title(f"{run.label}: perplexity", fontsize=10)
    return save(fig, path)
