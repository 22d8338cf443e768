"""Per-client accuracy summaries, as the seeds report them (PFLlib protocol)."""

from __future__ import annotations

import math

import numpy as np

SUMMARY_KEYS = ("acc_weighted", "acc_mean", "acc_std", "acc_worst10", "loss")


def summarize_clients(
    correct: np.ndarray, num_samples: np.ndarray, loss_sum: np.ndarray
) -> dict[str, float]:
    """Sample-weighted and unweighted accuracy, spread, worst-10% mean and mean loss.

    ``acc_weighted`` = sum correct / sum test samples; ``acc_mean``/``acc_std`` are over the
    per-client accuracies; ``acc_worst10`` is the mean of the worst ceil(10%) of clients.
    """
    correct = np.asarray(correct, dtype=np.float64)
    num_samples = np.asarray(num_samples, dtype=np.float64)
    per_client = correct / np.maximum(num_samples, 1)
    worst = np.sort(per_client)[: max(1, math.ceil(0.1 * len(per_client)))]
    return {
        "acc_weighted": float(correct.sum() / max(num_samples.sum(), 1)),
        "acc_mean": float(per_client.mean()),
        "acc_std": float(per_client.std()),
        "acc_worst10": float(worst.mean()),
        "loss": float(np.sum(loss_sum) / max(num_samples.sum(), 1)),
    }


def best_and_final(history: list[dict]) -> dict[str, dict]:
    """``{"best": ..., "final": ...}`` over evaluated rounds; best by ``acc_weighted``."""
    evaluated = [h for h in history if "acc_weighted" in h]
    if not evaluated:
        return {"best": {}, "final": {}}
    pick = ("round", *SUMMARY_KEYS)
    best = max(evaluated, key=lambda h: (h["acc_weighted"], -h["round"]))
    return {
        "best": {k: best[k] for k in pick},
        "final": {k: evaluated[-1][k] for k in pick},
    }
