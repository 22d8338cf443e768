"""``fedsim report RUN_DIR``: the standard plots of a run folder, as PNGs in ``RUN_DIR/plots/``.

Everything is derived from the run folder's files (metrics.jsonl, clients.csv,
partition.json, config.yaml), so a report can be redrawn at any time:

- ``accuracy_curves.png``: sample-weighted, unweighted mean (+- std) and worst-10% accuracy;
- ``client_accuracy_distribution.png``: per-round spread of client accuracies (percentiles);
- ``client_accuracy_vs_classes.png``: final per-client accuracy vs classes the client holds;
- ``client_accuracy_vs_samples.png``: final per-client accuracy vs its training samples;
- ``accuracy_vs_sim_time.png`` (runs that log ``sim_time``: asynchronous rounds, or
  ``asynchronous.speeds`` set): accuracy against simulated time.

An algorithm's own figures (cwFedAvg's ``row_norms.png``...), drawn at the end of a run from
its final state and redrawn by ``fedsim report`` from a final checkpoint, are the other PNGs
in ``plots/``; they are listed alongside.
"""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedsim.errors import ConfigError

ACCURACY_CURVES = "accuracy_curves.png"
CLIENT_DISTRIBUTION = "client_accuracy_distribution.png"
VS_CLASSES = "client_accuracy_vs_classes.png"
VS_SAMPLES = "client_accuracy_vs_samples.png"
REPORT_PLOTS = (ACCURACY_CURVES, CLIENT_DISTRIBUTION, VS_CLASSES, VS_SAMPLES)
VS_SIM_TIME = "accuracy_vs_sim_time.png"  # only for runs that log sim_time


@dataclass
class RunData:
    """A run folder's contents: per-round metrics, per-client rows, partition, config."""

    run_dir: Path
    metrics: list[dict[str, Any]]
    clients: dict[str, np.ndarray]  # column -> array over rows (client, round, accuracy, ...)
    partition: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # what could not be read, file and line

    @property
    def label(self) -> str:
        """``name (algorithm)`` for legends."""
        algorithm = (self.config.get("algorithm") or {}).get("name", "?")
        return f"{self.config.get('name', self.run_dir.name)} ({algorithm})"

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(rounds, values) of a per-round metric over the rounds that have it as a number."""
        rows = [m for m in self.metrics if _is_number(m.get(key))]
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
    "n": int,
    "classes": int,
    "weight": float,  # empty: the client did not train that round
    "attacked": lambda text: {"True": 1.0, "False": 0.0}[text],  # runs with an attack only
}  # and train/<name>: what the module logged (numbers)


def _read_metrics(path: Path, problems: list[str]) -> list[dict[str, Any]]:
    """metrics.jsonl's rounds; a line that is not a round's JSON object is skipped."""
    metrics = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            problems.append(f"{path}: line {number} is not JSON (cut mid-line?); skipped")
            continue
        if not isinstance(row, dict) or not isinstance(row.get("round"), int):
            problems.append(f"{path}: line {number} is not a round's record; skipped")
            continue
        metrics.append(row)
    return metrics


def _read_clients(path: Path, problems: list[str]) -> dict[str, np.ndarray]:
    """clients.csv as one typed array per column; a row that does not parse is skipped."""
    columns: dict[str, list[float]] = {}
    with open(path, newline="", errors="replace") as handle:
        reader = csv.DictReader(handle)
        names = [
            n for n in reader.fieldnames or [] if n in CLIENT_COLUMNS or n.startswith("train/")
        ]
        for number, row in enumerate(reader, start=2):
            try:
                values = {
                    n: float(CLIENT_COLUMNS.get(n, float)(row[n])) if row.get(n) else np.nan
                    for n in names
                }
                if any(not np.isfinite(values[n]) for n in ("client", "round") if n in values):
                    raise ValueError("no client or round")
            except (ValueError, KeyError, TypeError):
                problems.append(f"{path}: line {number} has a value that is not a number; skipped")
                continue
            for name, value in values.items():
                columns.setdefault(name, []).append(value)
    clients = {k: np.array(v, dtype=float) for k, v in columns.items()}
    for key in ("client", "round", "n", "classes"):
        if key in clients and np.all(np.isfinite(clients[key])):
            clients[key] = clients[key].astype(np.int64)
    return clients


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
    return RunData(
        run_dir=run_dir,
        metrics=metrics,
        clients=clients,
        partition=_read_mapping(run_dir / "partition.json", json.loads, "JSON", problems),
        config=_read_mapping(run_dir / "config.yaml", yaml.safe_load, "YAML", problems),
        summary=_read_mapping(run_dir / "summary.json", json.loads, "JSON", problems),
        problems=problems,
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _integer_ticks(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _save(fig: Any, path: Path) -> Path:
    for ax in fig.axes:
        if ax.get_xlabel() == "round":
            _integer_ticks(ax.xaxis)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)
    return path


def _save_accuracy_axes(
    fig: Any, ax: Any, path: Path, xlabel: str, ylabel: str, title: str
) -> Path:
    """Labels, a 0-1 accuracy axis, grid, legend and title; then save the figure."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title, fontsize=10)
    return _save(fig, path)


def plot_accuracy_curves(run: RunData, path: Path) -> Path:
    """Weighted, mean (+- std band) and worst-10% accuracy per evaluated round."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    rounds, mean = run.series("acc_mean")
    _, std = run.series("acc_std")
    for key, label in (
        ("acc_weighted", "weighted"),
        ("acc_mean", "mean over clients"),
        ("acc_worst10", "worst 10%"),
    ):
        x, y = run.series(key)
        ax.plot(x, y, marker="o" if len(x) <= 30 else None, ms=3, label=label)
    if len(rounds) and len(std) == len(mean):
        ax.fill_between(rounds, mean - std, mean + std, alpha=0.15, label="mean +- std")
    return _save_accuracy_axes(fig, ax, path, "round", "test accuracy", run.label)


def plot_accuracy_vs_sim_time(run: RunData, path: Path) -> Path:
    """Weighted and worst-10% accuracy of each evaluated round against its ``sim_time``: the
    virtual time at which the server held the model that round evaluates."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for key, label in (("acc_weighted", "weighted"), ("acc_worst10", "worst 10%")):
        rows = [m for m in run.metrics if _is_number(m.get(key)) and _is_number(m.get("sim_time"))]
        x = [m["sim_time"] for m in rows]
        ax.plot(x, [m[key] for m in rows], marker="o" if len(x) <= 30 else None, ms=3, label=label)
    return _save_accuracy_axes(
        fig,
        ax,
        path,
        "simulated time (virtual units: samples trained at speed 1)",
        "test accuracy",
        f"{run.label}: accuracy vs simulated time",
    )


def plot_client_distribution(run: RunData, path: Path) -> Path:
    """Percentile bands (min-max, 10-90, 25-75) and median of client accuracies per round."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    if len(run.clients.get("round", [])):
        rounds = np.unique(run.clients["round"])
        per_round = [run.clients["accuracy"][run.clients["round"] == r] for r in rounds]
        pct = np.array([np.percentile(a, [0, 10, 25, 50, 75, 90, 100]) for a in per_round])
        for (lo, hi), alpha, label in (
            ((0, 6), 0.12, "min-max"),
            ((1, 5), 0.2, "10-90%"),
            ((2, 4), 0.3, "25-75%"),
        ):
            ax.fill_between(rounds, pct[:, lo], pct[:, hi], alpha=alpha, color="C0", label=label)
        ax.plot(rounds, pct[:, 3], color="C0", label="median")
    return _save_accuracy_axes(
        fig, ax, path, "round", "client test accuracy", f"{run.label}: per-client accuracy"
    )


def train_samples(run: RunData, clients: np.ndarray) -> np.ndarray:
    """Training samples of each client (partition.json), or its test samples if absent."""
    sizes = {c["client"]: c["train"] for c in run.partition.get("clients", [])}
    return np.array([sizes.get(int(c), np.nan) for c in clients], dtype=float)


def plot_final_vs(run: RunData, path: Path, by: str) -> Path:
    """Final per-client accuracy against ``classes`` or training ``samples``, with trend."""
    plt = _pyplot()
    final = run.final_clients()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    accuracy = final.get("accuracy", np.array([]))
    if by == "classes":
        x = final.get("classes", np.array([])).astype(float)
        rng = np.random.default_rng(0)
        ax.scatter(x + rng.uniform(-0.15, 0.15, len(x)), accuracy, s=14, alpha=0.6)
        for value in np.unique(x):
            ax.plot(value, accuracy[x == value].mean(), "k_", ms=18, mew=2)
        if len(x):
            ax.set_xlim(x.min() - 0.6, x.max() + 0.6)
            ax.set_xticks(np.arange(int(x.min()), int(x.max()) + 1))
        ax.set_xlabel("classes in the client's training data (black: mean)")
    else:
        x = train_samples(run, final.get("client", np.array([], dtype=int)))
        ax.scatter(x, accuracy, s=14, alpha=0.6)
        ok = np.isfinite(x)
        if ok.sum() >= 2 and np.ptp(x[ok]) > 0:
            slope, intercept = np.polyfit(x[ok], accuracy[ok], 1)
            grid = np.linspace(x[ok].min(), x[ok].max(), 2)
            ax.plot(grid, slope * grid + intercept, "k--", lw=1, label="linear fit")
            ax.legend(fontsize=8, loc="lower right")
        ax.set_xlabel("training samples of the client")
    last = int(final["round"].max()) if len(final.get("round", [])) else 0
    ax.set_ylabel(f"test accuracy at round {last}")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(f"{run.label}: final per-client accuracy", fontsize=10)
    return _save(fig, path)


def write_report(run_dir: str | Path) -> list[Path]:
    """Every report plot into ``run_dir/plots/``; returns them plus existing algorithm figures.
    What could not be read is named on stderr, one line each (the plots show the rest)."""
    run = load_run(run_dir)
    for problem in run.problems:
        print(f"fedsim: warning: {problem}", file=sys.stderr)
    plots = run.run_dir / "plots"
    written = [
        plot_accuracy_curves(run, plots / ACCURACY_CURVES),
        plot_client_distribution(run, plots / CLIENT_DISTRIBUTION),
        plot_final_vs(run, plots / VS_CLASSES, "classes"),
        plot_final_vs(run, plots / VS_SAMPLES, "samples"),
    ]
    if any("sim_time" in m for m in run.metrics):
        written.append(plot_accuracy_vs_sim_time(run, plots / VS_SIM_TIME))
    written += sorted(p for p in plots.glob("*.png") if p.name not in (*REPORT_PLOTS, VS_SIM_TIME))
    return written
