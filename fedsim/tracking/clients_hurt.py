"""Clients hurt: per-client accuracy of a run against a reference run on the same clients
(Local, FedAvg, any), the share better / worse / within noise and the worst client's loss.

Each run is read at its *selected* round: the round its summary.json picked on validation
(``selected_on: validation``), else its final round (no selection on test); ``selection``
says which. A client is within noise when its difference is at most ``Z`` standard errors
of the difference of two accuracies measured on its n test samples,
``Z * sqrt((p_a (1 - p_a) + p_r (1 - p_r)) / n)``; better or worse beyond that. Held-out
clients (``eval.holdout_clients``) are counted apart, with their own shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedsim.errors import ConfigError
from fedsim.tracking.run_data import RunData

Z = 1.96  # standard errors a difference must exceed to count as better or worse


def selected_round(run: RunData) -> tuple[int, str]:
    """(round, what chose it): the validation-selected best round when the run has one,
    else its last evaluated round."""
    best = run.summary.get("best") or {}
    if run.summary.get("selected_on") == "validation" and "round" in best:
        return int(best["round"]), "validation-selected round"
    rounds = run.clients.get("round", np.zeros(0))
    if not len(rounds):
        raise ConfigError("run_dir", str(run.run_dir), "has no per-client rows (clients.csv)")
    return int(rounds.max()), "final round"


@dataclass
class HurtSummary:
    """Per-client differences (run minus reference) and their shares."""

    clients: np.ndarray  # client ids
    differences: np.ndarray  # accuracy differences, same order
    noise: np.ndarray  # Z standard errors per client
    selection: str  # which rounds were compared
    metric: str = "accuracy"  # what differences are in: accuracy, or perplexity's log (loss)

    @property
    def better(self) -> float:
        return float(np.mean(self.differences > self.noise)) if len(self.clients) else math.nan

    @property
    def worse(self) -> float:
        return float(np.mean(self.differences < -self.noise)) if len(self.clients) else math.nan

    @property
    def within(self) -> float:
        return 1.0 - self.better - self.worse if len(self.clients) else math.nan

    @property
    def worst_loss(self) -> float:
        """The largest accuracy (or, on perplexity, log-perplexity) a client lost (0: none)."""
        return float(max(0.0, -self.differences.min())) if len(self.clients) else math.nan

    def as_dict(self) -> dict[str, float | int | str]:
        return {"clients": len(self.clients), "better": self.better, "worse": self.worse,
                "within_noise": self.within, "worst_loss": self.worst_loss,
                "selection": self.selection}  # fmt: skip


def rows_at(columns: dict[str, np.ndarray], round_idx: int, keys: tuple[str, ...]
            ) -> dict[int, tuple[float, ...]]:  # fmt: skip
    """client -> (its ``keys`` columns..., test samples ``n``) at ``round_idx``."""
    if not len(columns.get("round", [])):
        return {}
    at = columns["round"] == round_idx
    picked = zip(columns["client"][at], *(columns[k][at] for k in keys), columns["n"][at],
                 strict=True)  # fmt: skip
    return {int(c): (*map(float, values), int(n)) for c, *values, n in picked}


@dataclass
class PairedClients:
    """Two runs' rows on the clients both evaluated, each at its selected round."""

    clients: list[int]
    mine: dict[int, tuple[float, ...]]  # client -> (keys..., n) of the run
    theirs: dict[int, tuple[float, ...]]  # the same of the reference
    selection: str  # which rounds were compared

    def column(self, i: int, reference: bool = False) -> np.ndarray:
        """The ``i``-th key over ``clients`` (-1: the test size), of the run or reference."""
        rows = self.theirs if reference else self.mine
        return np.array([rows[c][i] for c in self.clients], dtype=float)


def paired_clients(run: RunData, reference: RunData, keys: tuple[str, ...],
                   held_out: bool = False) -> PairedClients:  # fmt: skip
    """The one pairing behind every per-client comparison (accuracy here, the loss in
    ``hurt_metric``): each run at its selected round, the clients both evaluated
    (``held_out``: the held-out clients instead); ConfigError when a client's test size
    differs between the two (not the same clients)."""
    (r_round, how), (ref_round, ref_how) = selected_round(run), selected_round(reference)
    part = "held_out" if held_out else "clients"
    mine = rows_at(getattr(run, part), r_round, keys)
    theirs = rows_at(getattr(reference, part), ref_round, keys)
    common = sorted(set(mine) & set(theirs))
    for c in common:
        if mine[c][-1] != theirs[c][-1]:
            raise ConfigError(
                "reference", str(reference.run_dir), f"client {c} has {theirs[c][-1]} test "
                f"samples there and {mine[c][-1]} in {run.run_dir}: not the same clients "
                "(compare runs of the same data, partition and seed)",
            )  # fmt: skip
    selection = how if how == ref_how else f"{how} vs the reference's {ref_how}"
    return PairedClients(common, mine, theirs, selection)


def clients_hurt(run: RunData, reference: RunData, held_out: bool = False) -> HurtSummary:
    """Per-client accuracy differences of ``run`` against ``reference`` at each one's
    selected round, over the clients both evaluated (``held_out``: the held-out clients
    instead); ConfigError when the two runs do not have the same clients."""
    paired = paired_clients(run, reference, ("accuracy",), held_out)
    p_a, p_r = paired.column(0), paired.column(0, reference=True)
    n = paired.column(-1)
    noise = Z * np.sqrt((p_a * (1 - p_a) + p_r * (1 - p_r)) / np.maximum(n, 1))
    return HurtSummary(np.array(paired.clients, dtype=np.int64), p_a - p_r, noise,
                       paired.selection)  # fmt: skip


def plot_clients_hurt(
    pairs: list[tuple[str, HurtSummary]], reference: str, path: Path, note: str = ""
) -> Path:
    """Sorted per-client differences, one line per ``(label, summary)``, the noise band of
    each client shaded, saved to ``path``; ``note`` (e.g. the seed) goes into the title."""
    from fedsim.tracking.report import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, hurt in pairs:
        order = np.argsort(hurt.differences)
        x = np.arange(len(order)) / max(len(order) - 1, 1)
        line = ax.plot(
            x,
            100 * hurt.differences[order],
            marker="o",
            ms=2,
            label=(f"{label}: {100 * hurt.worse:.0f}% worse, {100 * hurt.better:.0f}% better"),
        )[0]
        ax.fill_between(x, -100 * hurt.noise[order], 100 * hurt.noise[order],
                        color=line.get_color(), alpha=0.12)  # fmt: skip
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xlabel("clients, sorted by difference (fraction)")
    if pairs and pairs[0][1].metric == "perplexity":
        ax.set_ylabel(f"{reference}'s test loss minus this (x100; > 0: lower perplexity)")
    else:
        ax.set_ylabel(f"accuracy minus {reference} (points)")
    selection = pairs[0][1].selection if pairs else ""
    where = ", ".join(w for w in (selection, note) if w)
    ax.set_title(f"per-client difference vs {reference} ({where}); band: noise", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


__all__ = ["Z", "HurtSummary", "PairedClients", "clients_hurt", "paired_clients",
           "plot_clients_hurt", "rows_at", "selected_round"]
