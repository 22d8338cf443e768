"""FedVG against its baselines on Dirichlet splits: the README table (scaled to a laptop).

The seed (003) reports FedVG above FedAvg, FedProx, SCAFFOLD and FedDyn on CIFAR-10 with
ResNet-18, 100 clients, 200 rounds. This runs the same comparison small: FedAvgCNN on
Fashion-MNIST (optionally a stratified subset of it: ``--samples`` = ``data.max_samples``,
the same subset for every run), Dir(alpha) over N clients, the PFLlib
protocol (75/25 split per client, batch 10 and 1 local epoch unless `--batch-size 32 --epochs 5
--lr 0.01` (the seed's), evaluation of the global model on
every client's test split each round), several seeds. Each (alpha, seed, algorithm) is one
``run_experiment`` (run folder ``<out>/runs/<name>/``); ``--jobs`` run side by side (one
torch thread each; ``--device cuda`` puts them on a GPU, ``--data-root`` says where the
dataset lies).

Algorithms (``--algorithms``, comma-separated):
  fedavg, fedvg, fedvg-avg, fedprox, fedprox-vg, scaffold, scaffold-vg, feddyn, feddyn-vg,
  fedavgm, fedavgm-vg; ``-vg`` = the same algorithm with ``algorithm.weighting=fedvg``;
  ``uniform`` = FedAvg with equal weights (the control: is FedVG more than flattening?).
``--same-data`` holds the validation share out of every client for the sample-weighted
baselines too (``val_holdout=true``), as FL-bench gives every method the same split.

Writes ``<out>/runs.jsonl`` (one line per run as it finishes: best and final accuracy, the
curve; runs go seed by seed, so a sweep cut short has whole seeds) and ``<out>/table.md``
(mean ± sample std over seeds of the sample-weighted accuracy: best round, final round, mean of the
last 10 rounds; and per-seed gaps: each ``-vg`` row to its base, FedVG and uniform to FedAvg,
FedVG to uniform). ``--table-from runs.jsonl`` prints the table of runs already made (several
files concatenated, too). Last line: ``RESULT fedvg_minus_fedavg=<mean best gap, per alpha>``.

    .venv/bin/python benchmarks/reproduce_fedvg.py --alphas 0.05,0.1 --seeds 0,1,2 \
        --clients 20 --rounds 20 --samples 10000 --epochs 5 --batch-size 32 --lr 0.01 \
        --same-data --algorithms fedavg,fedvg,fedprox,fedprox-vg,uniform --jobs 2 \
        --out runs/fedvg-repro
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.search.stats import mean_std_cell

ALGORITHMS: dict[str, list[str]] = {
    "fedavg": ["algorithm.name=fedavg"],
    "fedvg": ["algorithm.name=fedvg"],
    "fedvg-avg": ["algorithm.name=fedvg", "algorithm.weighting=avg"],
    "fedprox": ["algorithm.name=fedprox", "algorithm.mu=0.01"],
    "fedprox-vg": ["algorithm.name=fedprox", "algorithm.mu=0.01", "algorithm.weighting=fedvg"],
    "scaffold": ["algorithm.name=scaffold"],
    "scaffold-vg": ["algorithm.name=scaffold", "algorithm.weighting=fedvg"],
    "feddyn": ["algorithm.name=feddyn"],
    "feddyn-vg": ["algorithm.name=feddyn", "algorithm.weighting=fedvg"],
    "fedavgm": ["algorithm.name=fedavgm"],
    "fedavgm-vg": ["algorithm.name=fedavgm", "algorithm.weighting=fedvg"],
    "uniform": ["algorithm.name=fedvg", "algorithm.weighting=uniform"],
}
HOLD_OUT = ["algorithm.name=fedvg", "algorithm.val_holdout=true"]
SAME_DATA = {  # sample/uniform-weighted baselines that hold the validation share out too
    "fedavg": [*HOLD_OUT, "algorithm.weighting=samples"],
    "uniform": [*HOLD_OUT, "algorithm.weighting=uniform"],
}


KEYS = ("best", "final", "last10")  # best round, last round, mean of the last 10 rounds


def overrides_for(algorithm: str, same_data: bool) -> list[str]:
    if same_data and algorithm in SAME_DATA:
        return SAME_DATA[algorithm]
    extra = ALGORITHMS[algorithm]
    if same_data and not algorithm.endswith("-vg") and algorithm not in ("fedvg", "fedvg-avg"):
        extra = [*extra, "algorithm.val_holdout=true"]
    return extra


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """One fedsim run in this (worker) process."""
    import torch

    from fedsim.config import load_config
    from fedsim.experiment import run_experiment

    torch.set_num_threads(1)
    name = f"fedvg-{job['algorithm']}-a{job['alpha']}-s{job['seed']}"
    cfg = load_config(
        None,
        [
            f"name={name}",
            f"data.name={job['dataset']}",
            f"data.max_samples={'null' if job['samples'] is None else job['samples']}",
            f"data.root={job['data_root']}",
            "data.download=false",
            "runtime.executor=local",
            f"runtime.device={job['device']}",
            f"data.num_clients={job['clients']}",
            "data.partition.name=dirichlet",
            f"data.partition.alpha={job['alpha']}",
            f"rounds={job['rounds']}",
            f"seed={job['seed']}",
            f"join_ratio={job['join_ratio']}",
            f"client.lr={job['lr']}",
            f"client.epochs={job['epochs']}",
            f"client.batch_size={job['batch_size']}",
            f"model.name={job['model']}",
            *job["overrides"],
        ],
    )
    began = time.perf_counter()
    result = run_experiment(cfg, Path(job["out"]) / "runs" / name, progress=False, report=False)
    return {
        **{k: job[k] for k in ("algorithm", "alpha", "seed", "device", "model")},
        "best": result.summary["best"]["acc_weighted"],
        "best_round": result.summary["best"]["round"],
        "final": result.summary["final"]["acc_weighted"],
        "last10": float(np.mean([h["acc_weighted"] for h in result.history[-10:]])),
        "curve": [round(h.get("acc_weighted", float("nan")), 4) for h in result.history],
        "seconds": round(time.perf_counter() - began, 1),
    }


def gap_pairs(algorithms: list[str]) -> list[tuple[str, str]]:
    """(algorithm, its baseline) pairs to difference: each -vg against its base, FedVG and
    uniform weights against FedAvg, and FedVG against uniform (more than flattening?)."""
    pairs = [(a, a.removesuffix("-vg")) for a in algorithms if a.endswith("-vg")]
    pairs += [(a, "fedavg") for a in ("fedvg", "fedvg-avg", "uniform")]
    pairs.append(("fedvg", "uniform"))
    return [(a, b) for a, b in pairs if a in algorithms and b in algorithms]


def table(rows: list[dict[str, Any]], algorithms: list[str], alphas: list[float]) -> str:
    """Markdown: accuracy (mean ± std over seeds) per KEYS, and each -vg minus its base."""
    heads = [f"Dir({a}) {key}" for a in alphas for key in KEYS]
    lines = ["| algorithm | " + " | ".join(heads) + " |", "|---" * (1 + len(heads)) + "|"]
    by = {(r["algorithm"], r["alpha"], r["seed"]): r for r in rows}
    for algo in algorithms:
        cells = []
        for a in alphas:
            mine = [r for r in rows if r["algorithm"] == algo and r["alpha"] == a]
            cells += [mean_std_cell([r[k] for r in mine]) for k in KEYS]
        lines.append(f"| {algo} | " + " | ".join(cells) + " |")
    gaps = []
    for algo, base in gap_pairs(algorithms):
        cells = []
        for a in alphas:
            pairs = [
                (by[(algo, a, s)], by[(base, a, s)])
                for (x, aa, s) in by
                if x == algo and aa == a and (base, a, s) in by
            ]
            for key in KEYS:
                diffs = [p[key] - q[key] for p, q in pairs]
                wins = sum(d > 0 for d in diffs)
                cells.append(f"{mean_std_cell(diffs)} ({wins}/{len(diffs)} seeds up)")
        gaps.append(f"| {algo} − {base} | " + " | ".join(cells) + " |")
    return "\n".join(lines + gaps) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--samples", type=int, default=None, help="data.max_samples")
    parser.add_argument("--alphas", default="0.05,0.1")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--algorithms", default="fedavg,fedvg,fedprox,fedprox-vg")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--join-ratio", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--same-data", action="store_true")
    parser.add_argument("--model", default="fedavg_cnn")
    parser.add_argument("--device", default="cpu", help="runtime.device of every run")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--extra", default="", help="more overrides, space-separated")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="runs/fedvg-repro")
    parser.add_argument(
        "--table-from", default=None, help="only print the table of this runs.jsonl"
    )
    args = parser.parse_args()
    if args.table_from:
        rows = [json.loads(line) for line in open(args.table_from)]
        present = {r["algorithm"] for r in rows}
        alphas = sorted({r["alpha"] for r in rows})
        print(table(rows, [a for a in ALGORITHMS if a in present], alphas), end="")
        print_result(rows, alphas)
        return
    alphas = [float(a) for a in args.alphas.split(",")]
    algorithms = args.algorithms.split(",")
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        parser.error(f"unknown algorithms {unknown}; allowed: {', '.join(ALGORITHMS)}")
    jobs = [
        {
            "dataset": args.dataset,
            "samples": args.samples,
            "clients": args.clients,
            "rounds": args.rounds,
            "join_ratio": args.join_ratio,
            "lr": args.lr,
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "model": args.model,
            "device": args.device,
            "data_root": args.data_root,
            "out": args.out,
            "alpha": a,
            "seed": int(s),
            "algorithm": algo,
            "overrides": overrides_for(algo, args.same_data) + args.extra.split(),
        }
        for s in args.seeds.split(",")  # seed-major: a cut-short sweep has whole seeds
        for a in alphas
        for algo in algorithms
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    began = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool, open(out / "runs.jsonl", "w") as log:
        for done in as_completed([pool.submit(run_one, job) for job in jobs]):
            row = done.result()
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(
                f"{row['algorithm']:>11} Dir({row['alpha']}) seed {row['seed']}: best "
                f"{row['best']:.4f} (round {row['best_round']}), final {row['final']:.4f}, "
                f"last 10 {row['last10']:.4f}, "
                f"{row['seconds']} s",
                flush=True,
            )
    text = table(rows, algorithms, alphas)
    (out / "table.md").write_text(text)
    print(text)
    print(f"{len(jobs)} runs in {time.perf_counter() - began:.0f} s")
    print_result(rows, alphas)


def print_result(rows: list[dict[str, Any]], alphas: list[float]) -> None:
    gaps = []
    for a in alphas:
        diffs = [
            r["best"] - q["best"]
            for r in rows
            for q in rows
            if r["algorithm"] == "fedvg"
            and q["algorithm"] == "fedavg"
            and r["alpha"] == q["alpha"] == a
            and r["seed"] == q["seed"]
        ]
        if diffs:
            gaps.append(f"a{a}={statistics.mean(diffs):+.4f}")
    print("RESULT fedvg_minus_fedavg " + " ".join(gaps))


if __name__ == "__main__":
    main()
