"""Run folders side by side, over seeds: the table behind ``fedsim compare`` and
``ray_jobs.reproduce``'s results.md.

Runs are grouped into methods by ``name (algorithm)``, and within a method by ``seed``. Per
method, over its seeds (mean, sample std and a 95 % t interval, ``fedsim.search.stats``):

- ``acc``: test ``acc_weighted`` at the final round (no selection);
- ``val_acc``: test ``acc_weighted`` at the round selected on validation (runs with
  ``eval.validation_ratio``; n/a without: the best test round is selection on test);
- ``acc_std`` and ``worst10``: the spread of client accuracies and the mean of the worst
  10 % of clients, at the final round;
- ``flops``: FLOPs of local training per client round (runs with ``eval.count_flops``);
- ``mb_up`` / ``mb_down``: MB a trained client sends / receives per round;
- where the runs have them (``OPTIONAL``): next-token perplexity at the final round and at
  the round selected on validation, and the held-out clients' accuracy and perplexity at
  the final round (``eval.holdout_clients``).

Against each reference method (FedAvg, Local...), the clients hurt on the metric the table
reports (``hurt_metric.py``: perplexity for next-token runs, else accuracy) on the same
seeds; the gain on that metric over clients and seeds (``client_difference``: per client
averaged over the paired seeds, then a 95 % t interval and a paired t test over the
clients; held-out clients apart); and the paired difference of ``acc`` (and ``val_acc``)
over seeds with its interval and paired t test: a difference is marked supported when
p < 0.05.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.errors import ConfigError
from fedsim.search.stats import (
    PAIRED_TEST,
    mean_difference,
    mean_std,
    paired_difference,
    supported,
    t_interval,
)
from fedsim.tracking.clients_hurt import HurtSummary
from fedsim.tracking.hurt_metric import clients_hurt_on_metric
from fedsim.tracking.run_data import RunData, is_number, load_run

COLUMNS = {  # key -> header; each column says what chose its round
    "acc": "acc (final)",
    "val_acc": "acc (val-selected)",
    "acc_std": "client spread (final)",
    "worst10": "bottom decile (final)",
}
OPTIONAL = {  # shown only where some method has them: language models, held-out clients
    "ppl": "perplexity (final)",
    "val_ppl": "perplexity (val-selected)",
    "unseen_acc": "held-out acc (final)",
    "unseen_ppl": "held-out perplexity (final)",
}
LOWER_IS_BETTER = ("ppl", "val_ppl", "unseen_ppl")
COSTS = {"flops": "GFLOPs / client round", "mb_up": "MB up / client round",
         "mb_down": "MB down / client round"}  # fmt: skip


@dataclass
class Method:
    """One method's runs, by seed."""

    label: str
    algorithm: str
    runs: dict[int, RunData] = field(default_factory=dict)


def run_folders(paths: list[str | Path]) -> list[Path]:
    """The run folders under ``paths``: a run folder itself, a reproduce folder (its
    ``runs/``), or a folder of run folders; ConfigError for a path with none."""
    found: list[Path] = []
    for path in map(Path, paths):
        if (path / "metrics.jsonl").is_file():
            found.append(path)
            continue
        base = path / "runs" if (path / "runs").is_dir() else path
        inside = sorted(p for p in base.glob("*") if (p / "metrics.jsonl").is_file())
        if not inside:
            raise ConfigError("run_dir", str(path), "holds no run folder (no metrics.jsonl)")
        found += inside
    return found


def group_methods(runs: list[RunData]) -> list[Method]:
    """Methods in first-seen order; ConfigError when one method has a seed twice."""
    methods: dict[str, Method] = {}
    for run in runs:
        algorithm = str((run.config.get("algorithm") or {}).get("name", "?"))
        method = methods.setdefault(run.label, Method(run.label, algorithm))
        seed = int(run.config.get("seed", 0))
        if seed in method.runs:
            raise ConfigError(
                "run_dir", str(run.run_dir), f"is a second run of {run.label} with seed "
                f"{seed} (the other: {method.runs[seed].run_dir}); give one run per seed",
            )  # fmt: skip
        method.runs[seed] = run
    return list(methods.values())


def find_reference(methods: list[Method], name: str) -> Method:
    """The method labelled ``name``, or the one method whose algorithm is ``name``."""
    exact = [m for m in methods if m.label == name]
    by_algorithm = [m for m in methods if m.algorithm == name]
    if exact or len(by_algorithm) == 1:
        return (exact or by_algorithm)[0]
    labels = ", ".join(m.label for m in methods)
    why = "matches several methods" if by_algorithm else "matches no method"
    raise ConfigError("--reference", name, f"{why}; give one of: {labels}")


def _mean_of(run: RunData, key: str, per: str | None = None) -> float:
    rows = [m for m in run.metrics if is_number(m.get(key)) and (per is None or m.get(per))]
    if not rows:
        return math.nan
    return float(np.mean([m[key] / (m[per] if per else 1) for m in rows]))


def run_numbers(run: RunData) -> dict[str, float]:
    """One run's columns (see the module doc); nan where the run has no such number."""
    final, best = run.summary.get("final") or {}, run.summary.get("best") or {}
    validated = run.summary.get("selected_on") == "validation"
    return {
        "acc": float(final.get("acc_weighted", math.nan)),
        "val_acc": float(best.get("acc_weighted", math.nan)) if validated else math.nan,
        "acc_std": float(final.get("acc_std", math.nan)),
        "worst10": float(final.get("acc_worst10", math.nan)),
        "ppl": float(final.get("perplexity", math.nan)),
        "val_ppl": float(best.get("perplexity", math.nan)) if validated else math.nan,
        "unseen_acc": float(final.get("unseen/acc_weighted", math.nan)),
        "unseen_ppl": float(final.get("unseen/perplexity", math.nan)),
        "flops": _mean_of(run, "flops_per_client") / 1e9,
        "mb_up": _mean_of(run, "bytes_up", "num_trained") / 1e6,
        "mb_down": _mean_of(run, "bytes_down", "num_trained") / 1e6,
    }


def same_clients(a: RunData, b: RunData) -> bool:
    """Whether two runs have the same clients (every client's test split the same size)."""
    tests = [[c.get("test") for c in (r.partition.get("clients") or [])] for r in (a, b)]
    return bool(tests[0]) and tests[0] == tests[1]


def paired_runs(method: Method, reference: Method) -> list[tuple[RunData, RunData]]:
    """(run, reference run) on each seed both have; ConfigError when a pair's clients
    differ (then no seed pairs them: another data config or partition)."""
    pairs = []
    for seed in sorted(set(method.runs) & set(reference.runs)):
        run, ref = method.runs[seed], reference.runs[seed]
        if not same_clients(run, ref):
            raise ConfigError(
                "--reference", reference.label, f"seed {seed}: {run.run_dir} and "
                f"{ref.run_dir} do not have the same clients (partition.json); pair runs of "
                "the same data and partition",
            )  # fmt: skip
        pairs.append((run, ref))
    return pairs


def method_row(method: Method) -> dict[str, Any]:
    """A method's seeds and, per column, mean, std and 95 % interval over them."""
    numbers = [run_numbers(run) for _, run in sorted(method.runs.items())]
    row: dict[str, Any] = {"label": method.label, "seeds": len(numbers)}
    for key in (*COLUMNS, *OPTIONAL, *COSTS):
        values = [n[key] for n in numbers]
        row[f"{key}_mean"], row[f"{key}_std"] = mean_std(values)
        row[f"{key}_lo"], row[f"{key}_hi"] = t_interval(values)
    return row


def client_difference(hurt: list[HurtSummary]) -> dict[str, float]:
    """The gain over clients and seeds: per client, its difference (``HurtSummary``: on
    perplexity the reference's mean test loss per token minus the run's, else the accuracy
    minus the reference's) averaged over the paired seeds; then, over the clients,
    ``mean_difference`` (the mean, its 95 % t interval, the paired t test's p). The client is
    the unit: its seeds are not independent draws of it. ``clients``: how many."""
    per_client: dict[int, list[float]] = {}
    for h in hurt:
        for c, d in zip(h.clients, h.differences, strict=True):
            per_client.setdefault(int(c), []).append(float(d))
    gains = [float(np.mean(v)) for _, v in sorted(per_client.items())]
    return {**mean_difference(gains), "clients": len(gains), "seeds": len(hurt)}


def versus(method: Method, reference: Method) -> dict[str, Any]:
    """Clients hurt (mean share over the paired seeds) and paired differences against
    ``reference``; empty when they share no seed."""
    pairs = paired_runs(method, reference)
    if not pairs or method is reference:
        return {}
    # on the metric the table reports: perplexity (its per-token band) for next-token runs
    hurt: list[HurtSummary] = [clients_hurt_on_metric(run, ref) for run, ref in pairs]
    seeds = sorted(set(method.runs) & set(reference.runs))
    out: dict[str, Any] = {"reference": reference.label, "pairs": len(pairs), "seeds": seeds,
                           "selection": hurt[0].selection, "hurt": hurt,
                           "metric": hurt[0].metric}  # fmt: skip
    for share in ("worse", "better", "within", "worst_loss"):
        out[share] = float(np.mean([getattr(h, share) for h in hurt]))
    held = [clients_hurt_on_metric(run, ref, held_out=True)
            for run, ref in pairs if run.held_out]  # fmt: skip
    out["gain"] = client_difference(hurt)
    if held and all(len(h.clients) for h in held):
        out["held_out_worse"] = float(np.mean([h.worse for h in held]))
        out["held_out_gain"] = client_difference(held)
    for key in ("acc", "val_acc"):
        mine = [run_numbers(run)[key] for run, _ in pairs]
        theirs = [run_numbers(ref)[key] for _, ref in pairs]
        out[key] = paired_difference(mine, theirs)
    return out


def compare_methods(
    methods: list[Method], references: list[str]
) -> tuple[list[dict], dict[str, list[dict]]]:
    """(one row per method, {reference label: each other method's ``versus``})."""
    rows = [method_row(m) for m in methods]
    against: dict[str, list[dict]] = {}
    for name in references:
        ref = find_reference(methods, name)
        against[ref.label] = [{"label": m.label, **v} for m in methods if (v := versus(m, ref))]
    return rows, against


def dataset_of(run: RunData) -> str:
    """The dataset a run ran on, by its config's ``data.name`` ('' where none is given)."""
    return str((run.config.get("data") or {}).get("name", ""))


def check_comparable(runs: list[RunData]) -> None:
    """Every run finished (it has its summary.json) and all ran on one dataset; a
    ConfigError naming the first run that is not."""
    for run in runs:
        if not run.summary:
            raise ConfigError(
                "run_dir", str(run.run_dir), "has no summary.json: the run is still in "
                "progress or was killed before its end; compare it once it has finished "
                "(fedsim run CONFIG --resume continues a run from its checkpoint)",
            )  # fmt: skip
    first = runs[0] if runs else None
    for run in runs[1:]:
        if dataset_of(run) != dataset_of(first):
            raise ConfigError(
                "run_dir", str(run.run_dir), f"ran on data.name={dataset_of(run)!r} and "
                f"{first.run_dir} on {dataset_of(first)!r}: compare runs on one dataset",
            )  # fmt: skip


def load_methods(paths: list[str | Path]) -> list[Method]:
    """``group_methods`` of every run folder under ``paths``: finished runs, one dataset."""
    runs = [load_run(p) for p in run_folders(paths)]
    check_comparable(runs)
    return group_methods(runs)


__all__ = ["COLUMNS", "COSTS", "LOWER_IS_BETTER", "OPTIONAL", "PAIRED_TEST", "Method",
           "check_comparable", "client_difference", "compare_methods", "find_reference",
           "group_methods", "load_methods", "method_row", "run_folders", "run_numbers",
           "supported", "versus"]  # fmt: skip
