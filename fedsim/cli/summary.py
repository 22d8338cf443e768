"""A run's summary table, as ``fedsim run`` prints it at the end and ``fedsim report``
prints it for a run folder (best and final rounds, one metric a row)."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

SUMMARY_COLUMNS = ("acc_weighted", "acc_mean", "acc_std", "acc_worst10", "loss")
# shown when the run has them: held-out clients' accuracy and the gap, the global model's
EXTRA_COLUMNS = ("unseen/acc_weighted", "participation_gap", "global/acc_weighted",
                 "val/acc_weighted",  # and the validation split's (eval.validation_ratio)
                 "perplexity", "unseen/perplexity")  # next-token prediction


def summary_table(summary: dict, title: str) -> Table:
    """A run's best and final rounds (``fedsim run`` at the end, ``fedsim report``), one
    metric a row so the table stays within 80 columns whatever the run logged (held-out and
    global figures add rows, not columns); a value that is not a number (a summary.json
    edited by hand) shows as ``-``."""
    table = Table(title=title, min_width=min(len(title), 78))
    final = summary.get("final") if isinstance(summary.get("final"), dict) else {}
    columns = (*SUMMARY_COLUMNS, *(k for k in EXTRA_COLUMNS if k in final))
    whole = ("best", "best_on_test", "final")  # best_on_test: runs with validation only
    rows = [w for w in whole if isinstance(summary.get(w), dict) and summary[w]]
    table.add_column("")
    heads = {"best": f"best ({summary.get('selected_on', 'test')})", "best_on_test": "best (test)"}
    for which in rows:
        table.add_column(heads.get(which, which), justify="right")
    if rows:
        table.add_row("round", *(str(summary[w].get("round", "-")) for w in rows))
        for key in columns:
            table.add_row(key, *(_number(summary[w].get(key)) for w in rows))
    return table


def summary_title(name: object, algorithm: object, dataset: object) -> str:
    """The summary table's title: ``quickstart: fedavg on mnist-5k``."""
    return f"{name}: {algorithm} on {dataset}"


def _number(value: object) -> str:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return f"{value:.4f}" if ok else "-"


def print_summary(summary: dict, config: dict, run_dir: str) -> None:
    """``fedsim run``'s summary table of a run folder, with how the run ended unless it
    completed; a folder without a readable summary.json says so (one line on stderr)."""
    if not summary:
        print(f"fedsim: warning: {run_dir}: no readable summary.json (the run did not end?), "
              "so no summary table", file=sys.stderr)  # fmt: skip
        return
    title = summary_title(
        _section(config, "name") or Path(run_dir).name,
        _section(config, "algorithm", "name") or "?",
        _section(config, "data", "name") or "?",
    )
    status = summary.get("status")
    if status not in (None, "completed"):
        done = summary.get("rounds_completed")
        title += f" ({status}" + ("" if done is None else f" after {done} completed rounds") + ")"
    Console().print(summary_table(summary, title))


def _section(config: dict, *keys: str) -> object:
    """``config[key][...]``, or None where a level is missing or not a mapping."""
    value: object = config
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value
