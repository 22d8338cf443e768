"""Per-client accuracy summaries, as the seeds report them (PFLlib protocol), and, for
next-token prediction (a language model's per-token loss), perplexity."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

SUMMARY_KEYS = ("acc_weighted", "acc_mean", "acc_std", "acc_worst10", "loss")
PERPLEXITY_KEY = "perplexity"  # exp(loss): runs of next-token prediction only
MAX_LOG = 709.0  # exp() of more overflows a float: such a perplexity is inf


def perplexity(loss: float) -> float:
    """exp of a mean per-token cross-entropy (inf where it overflows)."""
    return math.exp(loss) if loss < MAX_LOG else math.inf


def summarize_clients(
    correct: np.ndarray, num_samples: np.ndarray, loss_sum: np.ndarray, tokens: bool = False
) -> dict[str, float]:
    """Sample-weighted and unweighted accuracy, spread, worst-10% mean and mean loss.

    ``acc_weighted`` = sum correct / sum test samples; ``acc_mean``/``acc_std`` are over the
    per-client accuracies; ``acc_worst10`` is the mean of the worst ceil(10%) of clients.
    ``tokens``: the samples are next-token targets, and ``perplexity`` is exp(``loss``), the
    exp of the mean loss per token over every client's tokens.
    """
    correct = np.asarray(correct, dtype=np.float64)
    num_samples = np.asarray(num_samples, dtype=np.float64)
    per_client = correct / np.maximum(num_samples, 1)
    worst = np.sort(per_client)[: max(1, math.ceil(0.1 * len(per_client)))]
    out = {
        "acc_weighted": float(correct.sum() / max(num_samples.sum(), 1)),
        "acc_mean": float(per_client.mean()),
        "acc_std": float(per_client.std()),
        "acc_worst10": float(worst.mean()),
        "loss": float(np.sum(loss_sum) / max(num_samples.sum(), 1)),
    }
    if tokens:
        out[PERPLEXITY_KEY] = perplexity(out["loss"])
    return out


UNSEEN_PREFIX = "unseen/"  # held-out clients' accuracies (eval.holdout_clients)
GLOBAL_PREFIX = "global/"  # the global model's (eval.model=both)
GAP_KEY = "participation_gap"  # acc_weighted of the training clients minus the held-out ones'
VAL_PREFIX = "val/"  # the same models on the clients' validation splits (eval.validation_ratio)
VAL_KEY = VAL_PREFIX + "acc_weighted"  # what "best" is selected on when a run has it


def evaluation_summary(
    correct: np.ndarray,
    num_samples: np.ndarray,
    loss_sum: np.ndarray,
    held_out: np.ndarray,
    global_correct: np.ndarray | None = None,
    global_loss_sum: np.ndarray | None = None,
    tokens: bool = False,
) -> dict[str, float]:
    """A round's accuracies: the training clients' (``summarize_clients``), the held-out
    clients' as ``unseen/*`` with ``participation_gap`` (seen minus unseen ``acc_weighted``),
    and the global model's on the training clients as ``global/*``; ``tokens``: with each
    one's perplexity (next-token prediction)."""
    held = np.asarray(held_out, dtype=bool)
    seen = ~held
    out: dict[str, float] = {}
    if seen.any():
        out.update(summarize_clients(correct[seen], num_samples[seen], loss_sum[seen], tokens))
    if held.any():
        unseen = summarize_clients(correct[held], num_samples[held], loss_sum[held], tokens)
        out.update({UNSEEN_PREFIX + k: v for k, v in unseen.items()})
        if seen.any():
            out[GAP_KEY] = out["acc_weighted"] - unseen["acc_weighted"]
    if global_correct is not None and seen.any():
        assert global_loss_sum is not None
        own = summarize_clients(
            global_correct[seen], num_samples[seen], global_loss_sum[seen], tokens
        )
        out.update({GLOBAL_PREFIX + k: v for k, v in own.items()})
    return out


# eval.select_on -> (the summary key, whether higher is better)
SELECTION_KEYS = {"accuracy": ("acc_weighted", True), "loss": ("loss", False),
                  "perplexity": (PERPLEXITY_KEY, False)}  # fmt: skip


def selection(select_on: str, tokens: bool) -> str:
    """``eval.select_on`` resolved: ``auto`` is loss for next-token prediction (``tokens``:
    the metric a language model's table reports), accuracy otherwise."""
    if select_on == "auto":
        return "loss" if tokens else "accuracy"
    return select_on


def best_and_final(
    history: list[dict], select_on: str = "auto", tokens: bool | None = None
) -> dict[str, Any]:
    """``{"best", "final", "selected_on", "selected_by"}`` over evaluated rounds (with the
    held-out clients', the global model's and the validation split's numbers of those rounds).

    "best" is the round best on ``select_on`` (``selection``: accuracy highest, loss or
    perplexity lowest) on validation when every evaluated round has it
    (``eval.validation_ratio``), reported with its test numbers, and then ``best_on_test``
    is the round a selection on test would pick (optimistic: test data chose it); without
    validation "best" is the best on test. Ties: the earlier round. ``selected_on`` says
    which split (``validation`` or ``test``), ``selected_by`` which key (``val/loss``...).
    ``tokens`` None: next-token prediction where the rounds have a perplexity."""
    if tokens is None:
        tokens = any(PERPLEXITY_KEY in h for h in history)
    key, higher = SELECTION_KEYS[selection(select_on, tokens)]
    evaluated = [h for h in history if "acc_weighted" in h]
    validated = bool(evaluated) and all(VAL_PREFIX + key in h for h in evaluated)
    selected_on = "validation" if validated else "test"
    selected_by = VAL_PREFIX + key if validated else key
    if not evaluated:
        return {"best": {}, "final": {}, "selected_on": selected_on, "selected_by": selected_by}
    extra = [
        k
        for k in evaluated[-1]
        if k == GAP_KEY or k.startswith((UNSEEN_PREFIX, GLOBAL_PREFIX, VAL_PREFIX))
    ]
    pick = ("round", *SUMMARY_KEYS, PERPLEXITY_KEY, *extra)
    sign = 1.0 if higher else -1.0

    def best_by(by: str) -> dict:
        best = max(evaluated, key=lambda h: (sign * h.get(by, -sign * math.inf), -h["round"]))
        return {k: best[k] for k in pick if k in best}

    out: dict[str, Any] = {
        "best": best_by(selected_by),
        "final": {k: evaluated[-1][k] for k in pick if k in evaluated[-1]},
        "selected_on": selected_on,
        "selected_by": selected_by,
    }
    if validated:
        out["best_on_test"] = best_by(key)
    return out


def cost_summary(flops: list[int], peak_bytes: list[int]) -> dict[str, float]:
    """A round's cost per trained client (``eval.count_flops``): mean FLOPs of local training
    (``flops_per_client``) and, measured on a GPU, the largest peak memory in MiB."""
    out: dict[str, float] = {}
    if flops:
        out["flops_per_client"] = float(np.mean(flops))
    if peak_bytes:
        out["peak_memory_mib"] = float(max(peak_bytes)) / 2**20
    return out


def cost_per_client_round(history: list[dict]) -> dict[str, dict[str, float]]:
    """summary.json's ``cost`` of a run that counted FLOPs (``eval.count_flops``; else
    empty): over its training rounds, the mean FLOPs of a trained client's local training
    and the mean bytes one sent and received (``bytes_up`` / ``bytes_down`` over
    ``num_trained``), and the largest peak GPU memory (GPU runs)."""
    counted = [h for h in history if "flops_per_client" in h]
    if not counted:
        return {}
    cost = {"flops_per_client_round": float(np.mean([h["flops_per_client"] for h in counted]))}
    for key in ("bytes_up", "bytes_down"):
        per = [h[key] / h["num_trained"] for h in counted if h.get("num_trained") and key in h]
        if per:
            cost[f"{key}_per_client_round"] = float(np.mean(per))
    peaks = [h["peak_memory_mib"] for h in counted if "peak_memory_mib" in h]
    if peaks:
        cost["peak_memory_mib"] = float(max(peaks))
    return {"cost": cost}


def time_to_accuracy(history: list[dict], targets: list[float]) -> dict[str, dict]:
    """``{"rounds_to_acc": {"0.8": 12, ...}, "time_to_acc": {...}}``: for each target, the
    first evaluated round whose ``acc_weighted`` reaches it, and that round's ``sim_time``
    (runs with a virtual clock only); None where the run never reached it."""
    if not targets:
        return {}
    evaluated = [h for h in history if "acc_weighted" in h]
    clock = any("sim_time" in h for h in evaluated)
    rounds: dict[str, int | None] = {}
    times: dict[str, float | None] = {}
    for target in targets:
        first = next((h for h in evaluated if h["acc_weighted"] >= target), None)
        key = f"{target:g}"
        rounds[key] = None if first is None else int(first["round"])
        times[key] = None if first is None else first.get("sim_time")
    return {"rounds_to_acc": rounds, **({"time_to_acc": times} if clock else {})}
