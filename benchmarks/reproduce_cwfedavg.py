"""Reproduce cwFedAvg's table rows: run configs x seeds, then print mean +- std per row.

    python benchmarks/reproduce_cwfedavg.py --dataset fmnist --rounds 5 --seeds 0 1 2 \\
        --rows fedavg cw-output-wdr --jobs 2
    python benchmarks/reproduce_cwfedavg.py --dataset fmnist --table-only

Each run is ``fedsim run configs/cwfedavg/<dataset>-<partition>-<row>.yaml seed=S rounds=R``
in its own process (one torch thread each), into ``<out>/<config>-r<R>-s<S>/``. A run whose
``summary.json`` exists is not run again, so several invocations (e.g. all rows with seed 0,
then the key rows with more seeds) build one table. The table reads every finished run under
``<out>``: acc_weighted, acc_mean, acc_std, acc_worst10 from summary.json "best" (best round
by acc_weighted, the seed's protocol) and "final", as mean +- std over seeds.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from repro_runs import ROOT, collect, run_one, table

CONFIGS = ROOT / "configs" / "cwfedavg"
ROWS = ("fedavg", "local", "cw-output-wdr", "cw-output", "cw-all-wdr", "cw-output-wdr-true")
ROW_NAMES = {
    "fedavg": "FedAvg",
    "local": "Local-only",
    "cw-output-wdr": "cwFedAvg (Output) + WDR, estimated r",
    "cw-output": "cwFedAvg (Output), no WDR, estimated r",
    "cw-all-wdr": "cwFedAvg (all layers) + WDR, estimated r",
    "cw-output-wdr-true": "cwFedAvg (Output) + WDR, true r",
}
PARTITION_NAMES = {"pat": "pathological, 2 classes/client", "dir": "practical, Dir(0.1)"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fmnist", help="config prefix: fmnist, mnist, ...")
    parser.add_argument("--partitions", nargs="+", default=list(PARTITION_NAMES))
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one core each)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "cwfedavg-repro")
    parser.add_argument("--table-only", action="store_true", help="only print the table")
    args = parser.parse_args(argv)

    if not args.table_only:
        jobs = [
            (CONFIGS / f"{args.dataset}-{partition}-{row}.yaml", seed)
            for seed in args.seeds
            for partition in args.partitions
            for row in args.rows
        ]
        missing = [str(c) for c, _ in jobs if not c.is_file()]
        if missing:
            print(f"no such config: {', '.join(sorted(set(missing)))}", file=sys.stderr)
            return 2
        args.out.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run_one, c, s, args.rounds, args.out) for c, s in jobs]
            for future in futures:
                run_dir, seconds, code = future.result()
                if seconds:
                    print(f"{run_dir.name}: {seconds:.0f} s" + (" FAILED" if code else ""))

    found = collect(args.out, args.dataset, args.rounds)
    for which in ("best", "final"):
        print(f"\n{args.dataset}, {args.rounds} rounds, {which} round (accuracy %)\n")
        print(table(found, which, PARTITION_NAMES, {r: ROW_NAMES[r] for r in ROWS}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
