"""Shared by the reproduce_* runners: one ``fedsim run`` per (config, seed), and the table
(percent, mean ± sample std over seeds: ``fedsim.search.stats``).

Run folders are ``<out>/<config stem>-r<rounds>-s<seed>``; one that has a ``summary.json`` is
finished and skipped, so a runner can be stopped and started again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from fedsim.search.stats import mean_std_cell

ROOT = Path(__file__).resolve().parent.parent
METRICS = ("acc_weighted", "acc_mean", "acc_std", "acc_worst10")


def run_one(config: Path, seed: int, rounds: int, out: Path) -> tuple[Path, float, int]:
    """``fedsim run`` one config and seed in a fresh single-threaded process."""
    run_dir = out / f"{config.stem}-r{rounds}-s{seed}"
    if (run_dir / "summary.json").is_file():
        return run_dir, 0.0, 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "fedsim.cli", "run", str(config),
        f"seed={seed}", f"rounds={rounds}", f"name={config.stem}-s{seed}",
        # one single-threaded process per run, several at once: this runner parallelizes
        # over runs, so each run stays in its process (the configs default to Ray's pool)
        "runtime.executor=local",
        "--out", str(run_dir), "--no-progress",
    ]  # fmt: skip
    began = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"FAILED {run_dir.name}: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    return run_dir, time.perf_counter() - began, proc.returncode


def collect(out: Path, dataset: str, rounds: int) -> dict[tuple[str, str], list[dict]]:
    """(partition, row) -> summary.json dicts of the finished runs with ``rounds`` rounds."""
    found: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for summary in sorted(out.glob(f"{dataset}-*-r{rounds}-s*/summary.json")):
        stem = summary.parent.name.rpartition("-s")[0].rpartition("-r")[0]
        partition, _, row = stem.removeprefix(f"{dataset}-").partition("-")
        found[(partition, row)].append(json.loads(summary.read_text()))
    return found


def table(
    found: dict[tuple[str, str], list[dict]],
    which: str,
    partitions: dict[str, str],
    rows: dict[str, str],
) -> str:
    """Markdown table of summary[which] ("best" or "final") per (partition, row), by name."""
    lines = [
        "| partition | method | seeds | round | " + " | ".join(METRICS) + " |",
        "|" + "---|" * (4 + len(METRICS)),
    ]
    for partition, partition_name in partitions.items():
        for row, row_name in rows.items():
            runs = found.get((partition, row))
            if not runs:
                continue
            rounds = ",".join(str(r) for r in sorted({int(r[which]["round"]) for r in runs}))
            cells = " | ".join(mean_std_cell([r[which][m] for r in runs]) for m in METRICS)
            lines.append(f"| {partition_name} | {row_name} | {len(runs)} | {rounds} | {cells} |")
    return "\n".join(lines)
