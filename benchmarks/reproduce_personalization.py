"""Personalization table: FedPer, Ditto, FedAMP, FedFomo against FedAvg and Local-only.

    python benchmarks/reproduce_personalization.py --dataset fmnist --rounds 3 --seeds 0 \\
        --rows fedavg fedper ditto fedamp fedfomo --jobs 2 --budget-min 40
    python benchmarks/reproduce_personalization.py --dataset fmnist --rounds 3 --table-only

Each run is ``fedsim run <config> seed=S rounds=R`` in its own single-threaded process, into
``<out>/<config>-r<R>-s<S>/``; configs are ``configs/fedper/<dataset>-<partition>-<row>.yaml``
for FedPer rows and ``configs/personalization/...`` for the others. A finished run (its
``summary.json`` exists) is never run again, so invocations add up to one table. Runs go
seed by seed, row by row (both partitions of a row together); ``--budget-min`` starts no
new run after that many minutes. The table reads every finished run under ``<out>``:
acc_weighted, acc_mean, acc_std, acc_worst10 of summary.json "best" (best round by
acc_weighted, the seeds' protocol) and "final", mean +- std over seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ROWS = {
    "fedavg": "FedAvg",
    "local": "Local-only",
    "fedper": "FedPer (K=1, n_i weights)",
    "fedper-ft": "FedPer + 1-epoch fine-tune, base frozen",
    "fedper-k2": "FedPer (K=2)",
    "fedper-sqrt": "FedPer, sqrt(n_i) weights",
    "fedper-cold": "FedPer after 3 cold-start FedAvg rounds",
    "fedper-tiers": "FedPer, K by device tier (3/2/1)",
    "ditto": "Ditto (mu 0.1)",
    "fedamp": "FedAMP (differentiable pull)",
    "fedfomo": "FedFomo (M=5)",
}
PARTITIONS = {"pat": "pathological, 2 classes/client", "dir": "practical, Dir(0.1)"}
METRICS = ("acc_weighted", "acc_mean", "acc_std", "acc_worst10")


def config_path(dataset: str, partition: str, row: str) -> Path:
    folder = "fedper" if row.startswith("fedper") else "personalization"
    return ROOT / "configs" / folder / f"{dataset}-{partition}-{row}.yaml"


def run_one(config: Path, seed: int, rounds: int, out: Path) -> tuple[Path, float, int]:
    """``fedsim run`` one config and seed in a fresh single-threaded process."""
    run_dir = out / f"{config.stem}-r{rounds}-s{seed}"
    if (run_dir / "summary.json").is_file():
        return run_dir, 0.0, 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "fedsim.cli", "run", str(config),
        f"seed={seed}", f"rounds={rounds}", f"name={config.stem}-s{seed}",
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


def cell(values: list[float]) -> str:
    """Percent mean +- std over seeds (the value alone for one seed)."""
    v = 100 * np.asarray(values)
    return f"{v.mean():.2f}" if len(v) == 1 else f"{v.mean():.2f} ± {v.std(ddof=1):.2f}"


def table(found: dict[tuple[str, str], list[dict]], which: str) -> str:
    """Markdown table of summary[which] ("best" or "final") per (partition, row)."""
    lines = [
        "| partition | method | seeds | round | " + " | ".join(METRICS) + " |",
        "|" + "---|" * (4 + len(METRICS)),
    ]
    for partition, partition_name in PARTITIONS.items():
        for row, row_name in ROWS.items():
            runs = found.get((partition, row))
            if not runs:
                continue
            rounds = ",".join(str(r) for r in sorted({int(r[which]["round"]) for r in runs}))
            cells = " | ".join(cell([r[which][m] for r in runs]) for m in METRICS)
            lines.append(f"| {partition_name} | {row_name} | {len(runs)} | {rounds} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fmnist", help="config prefix: fmnist, cifar10")
    parser.add_argument("--partitions", nargs="+", default=list(PARTITIONS), choices=PARTITIONS)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one core each)")
    parser.add_argument("--budget-min", type=float, default=None, help="no new run after it")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "personalization-repro")
    parser.add_argument("--table-only", action="store_true", help="only print the table")
    args = parser.parse_args(argv)

    if not args.table_only:
        jobs = [
            (config_path(args.dataset, partition, row), seed)
            for seed in args.seeds
            for row in args.rows
            for partition in args.partitions
        ]
        missing = sorted({str(c) for c, _ in jobs if not c.is_file()})
        if missing:
            print(f"no such config: {', '.join(missing)}", file=sys.stderr)
            return 2
        args.out.mkdir(parents=True, exist_ok=True)
        deadline = None if args.budget_min is None else time.time() + 60 * args.budget_min

        def guarded(config: Path, seed: int) -> tuple[Path, float, int] | None:
            if deadline is not None and time.time() > deadline:
                return None  # over budget: left for a later invocation
            return run_one(config, seed, args.rounds, args.out)

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(guarded, c, s) for c, s in jobs]
            for (config, seed), future in zip(jobs, futures, strict=True):
                done = future.result()
                if done is None:
                    print(f"{config.stem}-s{seed}: skipped (budget)")
                elif done[1]:
                    print(f"{done[0].name}: {done[1]:.0f} s" + (" FAILED" if done[2] else ""))

    found = collect(args.out, args.dataset, args.rounds)
    for which in ("best", "final"):
        print(f"\n{args.dataset}, {args.rounds} rounds, {which} round (accuracy %)\n")
        print(table(found, which))
    return 0


if __name__ == "__main__":
    sys.exit(main())
