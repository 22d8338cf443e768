"""Server optimizers: FedAdam, FedYogi, FedAdagrad beside FedAvg and FedAvgM, equal tuning.

    python benchmarks/reproduce_server_optimizers.py --rounds 10 --seeds 0 1 2 --jobs 2 \\
        --budget-min 50
    python benchmarks/reproduce_server_optimizers.py --rounds 10 --table-only

Setting: ``configs/server-optimizers/mnist5k-dir-<row>.yaml`` (mnist-5k, Dir(0.1), 20
clients, FedAvgCNN, client SGD lr 0.05, batch 10, 1 local epoch, join ratio 1). Every row gets
the same tuning budget: ``len(GRIDS[row])`` values of ``algorithm.server_lr`` (5 each), all
run on the selection seed (the first of ``--seeds``); the row's lr is the one with the highest
*final* acc_weighted on that seed, and only that lr is run on the other seeds (``--full-grid``
runs every lr on every seed). The main table is mean ± std (ddof 1) over the seeds of the
chosen lr; the grid table shows every (row, lr) that has finished runs.

Each run is ``fedsim run <config> seed=S rounds=R algorithm.server_lr=LR`` in its own
single-threaded process, into ``<out>/<config stem>-lr<LR>-r<R>-s<S>/``. A finished run (its
``summary.json`` exists) is never run again, so invocations add up to one table;
``--budget-min`` starts no new run after that many minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

from fedsim.search.stats import mean_std_cell

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "mnist5k-dir"
FAILED = "failed.txt"  # fedsim run exited 1 (a RunFailure, e.g. diverged clients): not rerun

# row -> (name, server optimizer in words)
ROWS = {
    "fedavg": ("FedAvg", "SGD, momentum 0"),
    "fedavgm": ("FedAvgM", "SGD, momentum 0.9"),
    "fedadam": ("FedAdam", "adam, b1 0.9, b2 0.99, tau 1e-3"),
    "fedyogi": ("FedYogi", "yogi, b1 0.9, b2 0.99, tau 1e-3"),
    "fedadagrad": ("FedAdagrad", "adagrad, b1 0.9, tau 1e-3"),
}
# The same budget for every row: five server learning rates, 2-3x apart, placed where
# each rule's effective step is sensible. FedAvg's lr 1 is the weighted mean itself; FedAvgM's
# momentum 0.9 multiplies the steady-state step by 10, so its grid sits ~10x lower; the
# adaptive rules take steps of about server_lr per coordinate (Reddi et al. tune them around
# 1e-2 to 1e-1 for their CNNs). Three-value grids put FedAvg's and FedAvgM's best lr on the
# upper edge, four put FedAvgM's there again, so every grid grew upwards to five.
GRIDS = {
    "fedavg": (0.5, 1.0, 2.0, 4.0, 8.0),
    "fedavgm": (0.1, 0.3, 1.0, 3.0, 10.0),
    "fedadam": (0.01, 0.03, 0.1, 0.3, 1.0),
    "fedyogi": (0.01, 0.03, 0.1, 0.3, 1.0),
    "fedadagrad": (0.01, 0.03, 0.1, 0.3, 1.0),
}


def config_path(row: str) -> Path:
    return ROOT / "configs" / "server-optimizers" / f"{PREFIX}-{row}.yaml"


def run_dir(out: Path, row: str, lr: float, rounds: int, seed: int) -> Path:
    return out / f"{PREFIX}-{row}-lr{lr:g}-r{rounds}-s{seed}"


def run_one(row: str, lr: float, seed: int, rounds: int, out: Path) -> tuple[Path, float, int]:
    """``fedsim run`` one (row, lr, seed) in a fresh single-threaded process."""
    folder = run_dir(out, row, lr, rounds, seed)
    if (folder / "summary.json").is_file() or (folder / FAILED).is_file():
        return folder, 0.0, 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "fedsim.cli", "run", str(config_path(row)),
        f"seed={seed}", f"rounds={rounds}", f"algorithm.server_lr={lr}",
        # one single-threaded process per run, several at once: this runner parallelizes
        # over runs, so each run stays in its process (the configs default to Ray's pool)
        "runtime.executor=local",
        f"name={folder.name}", "--out", str(folder), "--no-progress",
    ]  # fmt: skip
    began = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"FAILED {folder.name}: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        if proc.returncode == 1 and folder.is_dir():  # a RunFailure (clients diverged): kept
            (folder / FAILED).write_text(proc.stderr)
    return folder, time.perf_counter() - began, proc.returncode


def load(out: Path, row: str, lr: float, rounds: int, seed: int) -> dict | None:
    """The run's summary.json, with ``curve`` (acc_weighted by round) added; None if absent."""
    folder = run_dir(out, row, lr, rounds, seed)
    summary = folder / "summary.json"
    if (folder / FAILED).is_file() and not summary.is_file():  # counts as accuracy 0
        zero = {"round": 0, "acc_weighted": 0.0, "acc_mean": 0.0, "acc_worst10": 0.0}
        return {"status": "failed", "best": zero, "final": zero, "curve": {}}
    if not summary.is_file():
        return None
    found = json.loads(summary.read_text())
    curve = {}
    for line in (folder / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        curve[int(record["round"])] = record.get("acc_weighted")
    found["curve"] = curve
    return found


def choose(out: Path, row: str, rounds: int, seed: int) -> float | None:
    """The grid's lr with the highest final acc_weighted on ``seed``; None until all ran."""
    results = {lr: load(out, row, lr, rounds, seed) for lr in GRIDS[row]}
    if any(r is None for r in results.values()):
        return None
    return max(GRIDS[row], key=lambda lr: results[lr]["final"]["acc_weighted"])


def cell(values: list[float]) -> str:
    return mean_std_cell(values) if values else "n/a"


def count(runs: list[dict]) -> str:
    """How many runs, and how many of them failed (counted as accuracy 0)."""
    failed = sum(r["status"] == "failed" for r in runs)
    return f"{len(runs)}" + (f" ({failed} diverged)" if failed else "")


def tables(out: Path, rows: list[str], seeds: list[int], rounds: int, early: int) -> str:
    """The main table (chosen lr, every seed) and the grid table, in markdown."""
    main = [
        "| method | server optimizer | server_lr grid | chosen server_lr | seeds | "
        f"final acc_weighted | best acc_weighted | best round | acc_weighted @ round {early} "
        "| final acc_mean | final acc_worst10 |",
        "|" + "---|" * 11,
    ]
    grid = [
        f"| method | server_lr | chosen | seed-{seeds[0]} final | seed-{seeds[0]} best | seeds "
        "| final acc_weighted "
        f"| best acc_weighted | acc_weighted @ round {early} |",
        "|" + "---|" * 9,
    ]
    for row in rows:
        name, rule = ROWS[row]
        chosen = choose(out, row, rounds, seeds[0])
        for lr in GRIDS[row]:
            runs = [r for s in seeds if (r := load(out, row, lr, rounds, s)) is not None]
            if not runs:
                continue
            first = load(out, row, lr, rounds, seeds[0])
            mark = "**yes**" if lr == chosen else ""
            grid.append(
                f"| {name} | {lr:g} | {mark} | "
                + (cell([first["final"]["acc_weighted"]]) if first else "n/a")
                + " | "
                + (cell([first["best"]["acc_weighted"]]) if first else "n/a")
                + " | "
                + f"{count(runs)} | {cell([r['final']['acc_weighted'] for r in runs])} | "
                + f"{cell([r['best']['acc_weighted'] for r in runs])} | "
                + f"{cell([r['curve'].get(early, float('nan')) for r in runs])} |"
            )
        if chosen is None:
            continue
        runs = [r for s in seeds if (r := load(out, row, chosen, rounds, s)) is not None]
        best_rounds = ",".join(str(r) for r in sorted({int(r["best"]["round"]) for r in runs}))
        main.append(
            f"| {name} | {rule} | {', '.join(f'{lr:g}' for lr in GRIDS[row])} | {chosen:g} | "
            f"{count(runs)} | {cell([r['final']['acc_weighted'] for r in runs])} | "
            f"{cell([r['best']['acc_weighted'] for r in runs])} | {best_rounds} | "
            f"{cell([r['curve'].get(early, float('nan')) for r in runs])} | "
            f"{cell([r['final']['acc_mean'] for r in runs])} | "
            f"{cell([r['final']['acc_worst10'] for r in runs])} |"
        )
    head = f"mnist-5k Dir(0.1), {rounds} rounds, seeds {', '.join(map(str, seeds))}"
    return (
        f"{head}: chosen server_lr (best final acc_weighted on seed {seeds[0]}), "
        "accuracy %, mean ± std over seeds\n\n"
        + "\n".join(main)
        + f"\n\n{head}: the whole grid (accuracy %)\n\n"
        + "\n".join(grid)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2],
                        help="the first one selects each row's server_lr")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--early-round", type=int, default=5, help="a column's early round")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one core each)")
    parser.add_argument("--budget-min", type=float, default=None, help="no new run after it")
    parser.add_argument("--full-grid", action="store_true", help="every lr on every seed")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "server-optimizers")
    parser.add_argument("--table-only", action="store_true", help="only print the tables")
    args = parser.parse_args(argv)

    if not args.table_only:
        missing = sorted(str(config_path(r)) for r in args.rows if not config_path(r).is_file())
        if missing:
            print(f"no such config: {', '.join(missing)}", file=sys.stderr)
            return 2
        args.out.mkdir(parents=True, exist_ok=True)
        deadline = None if args.budget_min is None else time.time() + 60 * args.budget_min
        select, others = args.seeds[0], args.seeds[1:]

        def guarded(row: str, lr: float, seed: int) -> tuple[Path, float, int] | None:
            if deadline is not None and time.time() > deadline:
                return None  # over budget: left for a later invocation
            return run_one(row, lr, seed, args.rounds, args.out)

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            pending: dict[Future, tuple[str, float, int]] = {}

            def submit(row: str, lr: float, seed: int) -> None:
                pending[pool.submit(guarded, row, lr, seed)] = (row, lr, seed)

            def follow_up(row: str) -> None:
                """Once the row's grid is done on the selection seed: the other seeds."""
                chosen = choose(args.out, row, args.rounds, select)
                if chosen is None:
                    return
                lrs = GRIDS[row] if args.full_grid else (chosen,)
                for seed in others:
                    for lr in sorted(lrs, key=lambda v: v != chosen):  # chosen lr first
                        submit(row, lr, seed)

            waiting = set(args.rows)
            for row in args.rows:
                for lr in GRIDS[row]:
                    submit(row, lr, select)
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    row, lr, seed = pending.pop(future)
                    result = future.result()
                    if result is None:
                        print(f"{row}-lr{lr:g}-s{seed}: skipped (budget)")
                    elif result[1]:
                        failed = " FAILED" if result[2] else ""
                        print(f"{result[0].name}: {result[1]:.0f} s{failed}", flush=True)
                    if row in waiting and choose(args.out, row, args.rounds, select) is not None:
                        waiting.discard(row)
                        follow_up(row)

    print()
    print(tables(args.out, args.rows, args.seeds, args.rounds, args.early_round))
    return 0


if __name__ == "__main__":
    sys.exit(main())
