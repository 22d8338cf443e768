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
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from repro_runs import ROOT, collect, run_one, table

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
    # the PFLlib-fidelity rows (mnist5k configs only: benchmarks/results/personalization.md)
    "fedrep": "FedRep (1 head epoch)",
    "lgfedavg": "LG-FedAvg (output layer global)",
    "fedbabu": "FedBABU, no fine-tune (body + random head)",
    "fedbabu-ft": "FedBABU, 10 fine-tune epochs (eval rounds 0, 20)",
    "fedrod": "FedRoD (balanced softmax + personal head)",
    "apfl": "APFL (PFLlib's update)",
    "apfl-paper": "APFL (the paper's update)",
    "pfedme": "pFedMe (beta 1, personal models evaluated)",
    "pfedme-bt1-global": "pFedMe (beta 1, global model evaluated)",
    "perfedavg": "Per-FedAvg (FO, 2 epochs)",
    "moon": "MOON (mu 1, tau 0.5)",
    "moon-mu1": "MOON (mu 1, tau 1)",
    "moon-mu0": "MOON (mu 0: FedAvg)",
    "fedbn": "FedBN (fedavg_cnn_bn)",
    "fedavg-bn": "FedAvg (fedavg_cnn_bn)",
    "fednova": "FedNova (1 epoch each)",
    "fednova-unequal": "FedNova (1 + k mod 4 epochs)",
    "fedavg-unequal": "FedAvg (1 + k mod 4 epochs)",
}
PARTITIONS = {"pat": "pathological, 2 classes/client", "dir": "practical, Dir(0.1)"}


def config_path(dataset: str, partition: str, row: str) -> Path:
    folder = "fedper" if row.startswith("fedper") else "personalization"
    return ROOT / "configs" / folder / f"{dataset}-{partition}-{row}.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dataset", default="fmnist", help="config prefix: fmnist, cifar10, mnist5k"
    )
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
        print(table(found, which, PARTITIONS, ROWS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
