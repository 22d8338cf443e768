"""What a search leaves: ``trials.csv``, a ready-to-run ``best.yaml`` and a terminal table."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedsim.config import ExperimentConfig, config_from_dict
from fedsim.search.space import with_values


@dataclass
class TrialRow:
    """One line of trials.csv."""

    trial: str
    params: dict[str, Any]
    status: str
    rounds: int
    best: float
    best_round: int
    final: float
    run_dir: str


def finite(value: Any) -> bool:
    """A real number that is neither nan nor infinite."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def collect_rows(
    results: Any, cfg: ExperimentConfig, out: str | Path, metric: str, mode: str
) -> list[TrialRow]:
    """Per trial: sampled values, completed / stopped (by the scheduler) / unfinished (the
    search was interrupted) / error, rounds reached, best and final; best first."""
    rows = []
    sign = 1 if mode == "max" else -1
    for result in results:
        frame = result.metrics_dataframe
        records = [] if frame is None else frame.to_dict("records")
        records = [r for r in records if finite(r.get(metric))]
        trial_id = (result.metrics or {}).get("trial_id") or Path(result.path).name
        if records:
            best = max(records, key=lambda r: (sign * r[metric], -r["round"]))
            rounds = int(records[-1]["round"])
            best_value, best_round = float(best[metric]), int(best["round"])
            final = float(records[-1][metric])
        else:
            rounds, best_value, best_round, final = 0, math.nan, -1, math.nan
        if result.error is not None:
            status = "error"
        elif rounds >= cfg.rounds:
            status = "completed"
        else:  # Tune ended it (done), or the search was interrupted before it could
            status = "stopped" if (result.metrics or {}).get("done") else "unfinished"
        rows.append(
            TrialRow(
                trial=str(trial_id),
                params=dict(result.config or {}),
                status=status,
                rounds=rounds,
                best=best_value,
                best_round=best_round,
                final=final,
                run_dir=str(Path(out) / "runs" / str(trial_id)),
            )
        )
    rows.sort(key=lambda r: (not finite(r.best), -sign * r.best if finite(r.best) else 0))
    return rows


def close_stopped_runs(rows: list[TrialRow]) -> list[Path]:
    """summary.json (``status: stopped``) for stopped trials whose own run could not write it.

    A trial Tune stops closes its run itself (``Stopped``), but when Tune ends the trial's
    actor rather than reusing it, the run's thread can be cut short. Its metrics.jsonl holds
    every reported round; the summary is computed from it as the run would have.
    """
    from fedsim.deployment.driver import privacy_summary
    from fedsim.metrics import best_and_final

    written = []
    for row in rows:
        run_dir = Path(row.run_dir)
        metrics, summary = run_dir / "metrics.jsonl", run_dir / "summary.json"
        if row.status != "stopped" or summary.exists() or not metrics.is_file():
            continue
        history = [json.loads(line) for line in metrics.read_text().splitlines() if line]
        if not history:
            continue
        out: dict[str, Any] = {**best_and_final(history), "status": "stopped"}
        privacy = privacy_summary(history)
        if privacy is not None:
            out["privacy"] = privacy
        out["rounds_completed"] = int(history[-1]["round"]) + 1  # its last round committed
        summary.write_text(json.dumps(out, indent=2))
        written.append(summary)
    return written


def write_trials_csv(path: Path, rows: list[TrialRow], keys: list[str], metric: str) -> Path:
    """trials.csv: trial, searched values, status, rounds, best/final metric, run folder."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["trial", *keys, "status", "rounds", f"best_{metric}", "best_round", f"final_{metric}",
             "run_dir"]
        )  # fmt: skip
        for r in rows:
            writer.writerow(
                [r.trial, *(r.params.get(k) for k in keys), r.status, r.rounds, r.best,
                 r.best_round, r.final, r.run_dir]
            )  # fmt: skip
    return path


def write_best_yaml(
    path: Path, base: dict[str, Any], best: TrialRow, metric: str, mode: str, trials: int
) -> Path:
    """The best trial's full resolved config, validated, ready for ``fedsim run``."""
    cfg = config_from_dict(with_values(base, best.params))
    header = (
        f"# fedsim tune: best of {trials} trials by {metric} ({mode}) = {best.best:.4f} "
        f"at round {best.best_round} (trial {best.trial})\n"
        f"# searched: {json.dumps(best.params)}\n"
        f"# run it: fedsim run {path}\n"
    )
    path.write_text(header + yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return path


def print_table(rows: list[TrialRow], keys: list[str], metric: str, title: str) -> None:
    """The trials as a rich table, best first."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("trial", *keys, "status", "rounds", f"best {metric}", f"final {metric}"):
        table.add_column(col, justify="right")

    def show(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    for r in rows:
        table.add_row(
            r.trial,
            *(show(r.params.get(k)) for k in keys),
            r.status,
            str(r.rounds),
            f"{r.best:.4f}",
            f"{r.final:.4f}",
        )
    Console().print(table)
