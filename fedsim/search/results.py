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
    rounds: int  # rounds completed (summary.json's rounds_completed, Tune's reports')
    best: float
    best_round: int
    final: float
    run_dir: str
    final_round: int = -1  # the last evaluated round (-1: none reported)


def finite(value: Any) -> bool:
    """A real number that is neither nan nor infinite."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def rounds_completed(record: dict[str, Any], rounds: int) -> int:
    """The rounds a trial had completed at a Tune ``record``: its ``rounds_completed`` (a
    search from before reports carried it: the reported round's, committed whole)."""
    value = record.get("rounds_completed")
    return int(value) if finite(value) else min(int(record["round"]) + 1, rounds)


def collect_rows(
    results: Any, cfg: ExperimentConfig, out: str | Path, metric: str, mode: str
) -> list[TrialRow]:
    """Per trial: sampled values, completed / stopped (by the scheduler) / unfinished (the
    search was interrupted) / error, rounds completed, best and final; best first."""
    rows = []
    sign = 1 if mode == "max" else -1
    for result in results:
        frame = result.metrics_dataframe
        records = [] if frame is None else frame.to_dict("records")
        records = [r for r in records if finite(r.get(metric))]
        trial_id = (result.metrics or {}).get("trial_id") or Path(result.path).name
        if records:
            best = max(records, key=lambda r: (sign * r[metric], -r["round"]))
            rounds, last = rounds_completed(records[-1], cfg.rounds), int(records[-1]["round"])
            best_value, best_round = float(best[metric]), int(best["round"])
            final = float(records[-1][metric])
        else:
            rounds, last, best_value, best_round, final = 0, -1, math.nan, -1, math.nan
        if result.error is not None:
            status = "error"
        elif last >= cfg.rounds:
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
                final_round=last,
            )
        )
    rows.sort(key=lambda r: (not finite(r.best), -sign * r.best if finite(r.best) else 0))
    return rows


def close_stopped_runs(rows: list[TrialRow], rounds: int, report: bool = True) -> list[Path]:
    """summary.json (``status: stopped``) and, with ``report``, the report plots of stopped
    trials whose own run could not finish writing them.

    A trial Tune stops closes its run itself (``Stopped``), but its thread may be cut short:
    when Tune ends the trial's actor rather than reusing it, or the search ends (and Ray with
    it) while the thread still draws. Its metrics.jsonl holds every reported round, each
    committed whole; the summary is computed from it as the run's loop computes it.
    ``rounds``: the config's.
    """
    from fedsim.rounds.loop import run_summary
    from fedsim.run_figures import write_report_safely
    from fedsim.tracking.report import REPORT_PLOTS

    written = []
    for row in rows:
        run_dir = Path(row.run_dir)
        metrics, summary = run_dir / "metrics.jsonl", run_dir / "summary.json"
        if row.status != "stopped" or not metrics.is_file():
            continue
        history = [json.loads(line) for line in metrics.read_text().splitlines() if line]
        if not history:
            continue
        if not _readable_json(summary):
            done = min(int(history[-1]["round"]) + 1, rounds)  # its last round committed
            summary.write_text(json.dumps(run_summary(history, "stopped", done), indent=2))
            written.append(summary)
        if report and not all((run_dir / "plots" / name).is_file() for name in REPORT_PLOTS):
            written += write_report_safely(run_dir)
    return written


def _readable_json(path: Path) -> bool:
    try:
        json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return True


def write_trials_csv(path: Path, rows: list[TrialRow], keys: list[str], metric: str) -> Path:
    """trials.csv: trial, searched values, status, rounds completed, best and final metric
    with their rounds, run folder."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["trial", *keys, "status", "rounds", f"best_{metric}", "best_round", f"final_{metric}",
             "final_round", "run_dir"]
        )  # fmt: skip
        for r in rows:
            writer.writerow(
                [r.trial, *(r.params.get(k) for k in keys), r.status, r.rounds, r.best,
                 r.best_round, r.final, r.final_round, r.run_dir]
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
