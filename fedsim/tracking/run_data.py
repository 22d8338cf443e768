"""Reading a run folder back (``fedsim report``, the notebook): metrics.jsonl, clients.csv,
partition.json, config.yaml and summary.json into one ``RunData``.

What cannot be read is left out and said, one line per file and reason (``problems``): a
damaged folder still draws what it holds.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedsim.errors import ConfigError


@dataclass
class RunData:
    """A run folder's contents: per-round metrics, per-client rows, partition, config."""

    run_dir: Path
    metrics: list[dict[str, Any]]
    # column -> array over rows (client, round, accuracy, ...): the federation's clients
    clients: dict[str, np.ndarray]
    partition: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # what could not be read, file and line
    # held-out clients' rows (eval.holdout_clients), apart: every per-client plot is of the
    # clients that trained, and the held-out ones have their own
    held_out: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``name (algorithm)`` for legends."""
        algorithm = (self.config.get("algorithm") or {}).get("name", "?")
        return f"{self.config.get('name', self.run_dir.name)} ({algorithm})"

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(rounds, values) of a per-round metric over the rounds that have it as a number."""
        rows = [m for m in self.metrics if is_number(m.get(key))]
        return np.array([m["round"] for m in rows]), np.array([m[key] for m in rows], dtype=float)

    def final_clients(self) -> dict[str, np.ndarray]:
        """Per-client rows of the last evaluated round."""
        if not len(self.clients.get("round", [])):
            return {k: v[:0] for k, v in self.clients.items()}
        last = self.clients["round"] == self.clients["round"].max()
        return {k: v[last] for k, v in self.clients.items()}


# clients.csv's columns (fedsim.tracking.base.ClientRow) and how each is read back
CLIENT_COLUMNS: dict[str, Any] = {
    "client": int,
    "round": int,
    "accuracy": float,
    "loss": float,
    "perplexity": float,  # runs of next-token prediction only
    "loss_sd": float,  # runs of next-token prediction only: per-token losses' spread
    "n": int,
    "classes": int,
    "weight": float,  # empty: the client did not train that round
    "attacked": lambda text: {"True": 1.0, "False": 0.0}[text],  # runs with an attack only
    "held_out": lambda text: {"True": 1.0, "False": 0.0}[text],  # runs with held-out clients
    "global_accuracy": float,  # runs with eval.model=both
    "val_accuracy": float,  # runs with eval.validation_ratio > 0
    "flops": float,  # runs with eval.count_flops
    "peak_memory_mib": float,  # runs with eval.count_flops (on a GPU)
}  # and train/<name>: what the module logged (numbers)


def _read_metrics(path: Path, problems: list[str]) -> list[dict[str, Any]]:
    """metrics.jsonl's rounds; a line that is not a round's JSON object is skipped."""
    metrics = []
    skipped: dict[str, list[int]] = {}  # why -> line numbers
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            skipped.setdefault("not JSON (cut mid-line?)", []).append(number)
            continue
        if not isinstance(row, dict) or not isinstance(row.get("round"), int):
            skipped.setdefault("not a round's record", []).append(number)
            continue
        metrics.append(row)
    problems += [
        lines_problem(path, numbers, f"{why}; skipped") for why, numbers in skipped.items()
    ]
    return metrics


def _finite(value: float | None) -> bool:
    return value is not None and bool(np.isfinite(value))


def _cell(name: str, text: str | None) -> float | None:
    """A clients.csv cell as a number (NaN when empty or absent); None when it is not one."""
    if not text:
        return np.nan
    try:
        return float(CLIENT_COLUMNS.get(name, float)(text))
    except (ValueError, KeyError, TypeError):
        return None


def _read_clients(path: Path, problems: list[str]) -> dict[str, np.ndarray]:
    """clients.csv as one typed array per column. A row whose client, round or another of
    fedsim's columns does not parse is skipped; a logged ``train/<name>`` value that does not
    is left out (NaN), the rest of its row kept. Each is said once per column."""
    columns: dict[str, list[float]] = {}
    skipped: dict[str, list[int]] = {}  # why -> line numbers
    with open(path, newline="", errors="replace") as handle:
        reader = csv.DictReader(handle)
        names = [
            n for n in reader.fieldnames or [] if n in CLIENT_COLUMNS or n.startswith("train/")
        ]
        for number, row in enumerate(reader, start=2):
            values = {n: _cell(n, row.get(n)) for n in names}
            wrong = [n for n in names if values[n] is None]
            for name in (n for n in wrong if n.startswith("train/")):
                skipped.setdefault(f"{name} is not a number; left out", []).append(number)
                values[name] = np.nan
            own = [n for n in wrong if not n.startswith("train/")]
            own += [n for n in ("client", "round") if n not in wrong and not _finite(values.get(n))]
            if own:
                why = f"{own[0]} is {'not a number' if own[0] in wrong else 'missing'}"
                skipped.setdefault(f"{why}; skipped", []).append(number)
                continue
            for name, value in values.items():
                columns.setdefault(name, []).append(value)
    problems += [lines_problem(path, numbers, why) for why, numbers in skipped.items()]
    clients = {k: np.array(v, dtype=float) for k, v in columns.items()}
    for key in ("client", "round", "n", "classes"):
        if key in clients and np.all(np.isfinite(clients[key])):
            clients[key] = clients[key].astype(np.int64)
    return clients


def lines_problem(path: Path, numbers: list[int], why: str) -> str:
    """One ``problems`` line for every line of ``path`` that ``why`` applies to:
    ``line 3: ...`` or ``12 lines (2-13): ...``."""
    if len(numbers) == 1:
        return f"{path}: line {numbers[0]}: {why}"
    spans: list[list[int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    shown = [f"{a}-{b}" if b > a else str(a) for a, b in spans[:4]]
    more = ", ..." if len(spans) > 4 else ""
    return f"{path}: {len(numbers)} lines ({', '.join(shown)}{more}): {why}"


def _read_mapping(path: Path, loader: Any, what: str, problems: list[str]) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        value = loader(path.read_text(errors="replace"))
    except Exception as err:  # noqa: BLE001 - any unreadable file is reported, not raised
        mark = getattr(err, "problem_mark", None) or getattr(err, "lineno", None)
        line = mark.line + 1 if hasattr(mark, "line") else mark
        where = f" (line {line})" if line else ""
        problems.append(f"{path}: not {what}{where}; left out")
        return {}
    if not isinstance(value, dict):
        if value is not None:
            problems.append(f"{path}: not a {what} mapping; left out")
        return {}
    return value


def load_run(run_dir: str | Path) -> RunData:
    """Read a run folder (raises ConfigError when it is not one). A file or line that cannot be
    read is left out and named in ``problems`` (what it could read is drawn)."""
    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.jsonl"
    if not metrics_path.is_file():
        raise ConfigError("run_dir", str(run_dir), "not a run folder (no metrics.jsonl)")
    problems: list[str] = []
    metrics = _read_metrics(metrics_path, problems)
    clients_path = run_dir / "clients.csv"
    clients = _read_clients(clients_path, problems) if clients_path.is_file() else {}
    clients, held_out = split_held_out(clients)
    return RunData(
        run_dir=run_dir,
        metrics=metrics,
        clients=clients,
        held_out=held_out,
        partition=_read_mapping(run_dir / "partition.json", json.loads, "JSON", problems),
        config=_read_mapping(run_dir / "config.yaml", yaml.safe_load, "YAML", problems),
        summary=_read_mapping(run_dir / "summary.json", json.loads, "JSON", problems),
        problems=problems,
    )


def split_held_out(
    clients: dict[str, np.ndarray],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(the federation's rows, the held-out clients' rows) of clients.csv's columns."""
    flags = clients.get("held_out")
    if flags is None:
        return clients, {}
    held = flags == 1.0
    return {k: v[~held] for k, v in clients.items()}, {k: v[held] for k, v in clients.items()}


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
