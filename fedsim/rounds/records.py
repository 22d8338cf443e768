"""A round's record from its client results: the summary line, the per-client rows, warnings.

Pure functions of what the workers returned; the simulation logs what they build.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from fedsim.errors import ClientFailureError
from fedsim.metrics import VAL_PREFIX, cost_summary, evaluation_summary, perplexity
from fedsim.runtime.training import EvalResult
from fedsim.runtime.worker import ClientResult, WorkerResult
from fedsim.tracking.base import ClientRow, RoundRecord


def aggregation_shares(results: list[ClientResult]) -> dict[int, float]:
    """Each trained client's share of the round's aggregate: its weight over the summed
    weight, averaged over the weighted sums the algorithm keeps (FedAvg: n_i / sum n;
    FedVG: its validation-gradient weight; ``avg`` mode: the mean of the two)."""
    totals: dict[str, float] = {}
    for c in results:
        for key, weight in c.weights.items():
            totals[key] = totals.get(key, 0.0) + weight
    shares = {}
    for c in results:
        parts = [w / totals[k] for k, w in c.weights.items() if totals[k] > 0]
        if parts:
            shares[c.client] = float(np.mean(parts))
    return shares


def failure_warning(failed: list[int], cohort: set[int], diverged: bool) -> str:
    """The round's warning line for clients whose loss turned non-finite."""
    text = f"{len(failed)} of {len(cohort) or len(failed)} clients had non-finite losses"
    if diverged:
        return f"{text}: more than max_failed_fraction, the run stops"
    if cohort and len(failed) == len(cohort):
        return f"{text}: no client finished, the model did not change this round"
    return f"{text} and were left out of the aggregate"


def divergence_error(
    round_idx: int,
    failed: list[int],
    of: str,
    max_failed_fraction: float,
    done: int,
    hint: str = "lower client.lr?",
) -> ClientFailureError:
    """The one-line error of a run stopped because too many of ``of`` (e.g. "10 clients")
    had non-finite losses in round ``round_idx``, after ``done`` completed rounds; ``hint``
    says what to change."""
    return ClientFailureError(
        f"round {round_idx}: {len(failed)} of {of} had non-finite losses (clients "
        f"{failed[:10]}); allowed fraction max_failed_fraction={max_failed_fraction}; {hint} "
        f"(summary.json: status diverged after {done} rounds)"
    )


EVAL_FIELDS = ("correct", "num_samples", "loss_sum")  # an EvalResult's, in summary order


def round_summary(
    results: list[ClientResult],
    worker_results: list[WorkerResult],
    failed: list[int],
    began: float,
    tokens: bool = False,
) -> dict[str, Any]:
    """metrics.jsonl's line for a round: accuracies, train loss, counts and timings
    (``tokens``: next-token prediction, with perplexities)."""
    summary: dict[str, Any] = {}
    evaluated = [c for c in results if c.evaluation is not None]
    if evaluated:
        results_of = [c.evaluation for c in evaluated]
        summary.update(
            evaluation_summary(
                np.array([e.correct for e in results_of]),
                np.array([e.num_samples for e in results_of]),
                np.array([e.loss_sum for e in results_of]),
                np.array([c.held_out for c in evaluated]),
                *global_columns(evaluated),
                tokens=tokens,
            )
        )
        valid = [c for c in evaluated if c.validation is not None]  # eval.validation_ratio
        if valid and len(valid) == len(evaluated):
            on_val = [c.validation for c in valid]
            counts = [np.array([getattr(v, k) for v in on_val]) for k in EVAL_FIELDS]
            held = np.array([c.held_out for c in valid])
            val = evaluation_summary(*counts, held, tokens=tokens)
            summary.update({VAL_PREFIX + k: v for k, v in val.items()})
    after = sum(c.after_training for c in evaluated)
    if after:  # eval.when=after_training: how many were judged on the model they kept
        summary["evaluated_after_training"] = after
    losses = [c.train_loss for c in results if c.train_loss is not None and not c.failed]
    if losses:
        summary["train_loss"] = float(np.mean(losses))
    summary["num_trained"] = sum(c.train_loss is not None for c in results) - len(failed)
    trained = [c for c in results if c.flops is not None and not c.failed]  # eval.count_flops
    peaks = [c.peak_memory for c in trained if c.peak_memory is not None]
    summary.update(cost_summary([c.flops for c in trained if c.flops is not None], peaks))
    logged: dict[str, list[float]] = {}  # the module's self.log values, per trained client
    for c in results:
        if not c.failed:
            for name, value in c.logged.items():
                logged.setdefault(name, []).append(value)
    for name, values in sorted(logged.items()):
        summary[f"train/{name}"] = float(np.mean(values))
    if failed:
        summary["failed_clients"] = failed
    summary["seconds"] = time.perf_counter() - began
    summary["train_seconds_max_worker"] = max((w.train_seconds for w in worker_results), default=0)
    return summary


def global_columns(evaluated: list[ClientResult]) -> tuple[np.ndarray | None, ...]:
    """The global model's correct counts and loss sums beside the clients' own (eval.model=
    both; zeros for held-out clients, which have none); (None, None) otherwise."""
    if any(c.global_evaluation is None for c in evaluated if not c.held_out):
        return None, None
    pairs = [(0, 0.0) if g is None else (g.correct, g.loss_sum)
             for g in (c.global_evaluation for c in evaluated)]  # fmt: skip
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def loss_spread(evaluation: EvalResult) -> float:
    """The standard deviation of a client's per-target losses (population form)."""
    n = max(evaluation.num_samples, 1)
    mean = evaluation.loss_sum / n
    return float(np.sqrt(max(evaluation.loss_sq_sum / n - mean * mean, 0.0)))


def round_record(
    round_idx: int,
    summary: dict[str, Any],
    results: list[ClientResult],
    num_classes: np.ndarray,
    weights: dict[int, float] | None = None,
    tokens: bool = False,
) -> RoundRecord:
    """The round's record: its summary and one row per evaluated client.

    ``weights``: each client's ``weight`` column as the algorithm reports it (a
    ``train_round``'s collaboration weights); default its share of the round's aggregate.
    ``tokens``: next-token prediction, each row with its perplexity.
    """
    record = RoundRecord(round=round_idx, summary=summary)
    shares = aggregation_shares(results) if weights is None else weights
    held_out = any(c.held_out for c in results)  # the column: runs with held-out clients
    record.clients = [
        ClientRow(
            client=c.client,
            round=round_idx,
            accuracy=c.evaluation.correct / max(c.evaluation.num_samples, 1),
            loss=c.evaluation.loss_sum / max(c.evaluation.num_samples, 1),
            perplexity=perplexity(c.evaluation.loss_sum / max(c.evaluation.num_samples, 1))
            if tokens
            else None,
            loss_sd=loss_spread(c.evaluation) if tokens else None,
            n=c.evaluation.num_samples,
            classes=int(num_classes[c.client]),
            weight=shares.get(c.client),
            train=dict(c.logged) or None,
            held_out=c.held_out if held_out else None,
            global_accuracy=None
            if c.global_evaluation is None
            else c.global_evaluation.correct / max(c.global_evaluation.num_samples, 1),
            val_accuracy=None
            if c.validation is None
            else c.validation.correct / max(c.validation.num_samples, 1),
            flops=c.flops,
            peak_memory_mib=None if c.peak_memory is None else c.peak_memory / 2**20,
        )
        for c in results
        if c.evaluation is not None
    ]
    return record
