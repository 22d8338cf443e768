"""Seen vs unseen clients: the participation gap of 12 algorithms (issue 38's table).

    python benchmarks/generalization.py --seeds 0 1 2 --jobs 2
    python benchmarks/generalization.py --table-only

Each run is ``fedsim run configs/generalization/fmnist.yaml`` with one row's algorithm keys,
one partition and one seed, in its own single-threaded process, into
``<out>/<partition>-<row>-s<seed>/`` (a finished run, one with ``summary.json``, is skipped,
so invocations add up). 20 % of the clients are held out and served as newcomers by each
algorithm's own rule (docs/algorithms.md, "Clients that never trained"). The table reads the
final round of every finished run: the training clients' ``acc_weighted``, the held-out
clients' ``unseen/acc_weighted`` and ``unseen/acc_worst10``, ``participation_gap``, and how
much each moved over the last 10 rounds (a plateau: near 0), mean +- std over seeds, with
each run's minutes.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fedsim.search.stats import mean_std_cell  # noqa: E402

CONFIG = ROOT / "configs" / "generalization" / "fmnist.yaml"
ROWS: dict[str, tuple[str, list[str]]] = {
    "fedavg": ("FedAvg", ["algorithm.name=fedavg"]),
    "fedprox": ("FedProx (mu 0.01)", ["algorithm.name=fedprox", "algorithm.mu=0.01"]),
    "fedper": ("FedPer (K=1)", ["algorithm.name=fedper"]),
    "fedrep": ("FedRep", ["algorithm.name=fedrep"]),
    "lgfedavg": ("LG-FedAvg", ["algorithm.name=lgfedavg"]),
    "fedbabu": ("FedBABU", ["algorithm.name=fedbabu"]),
    "fedrod": ("FedRoD", ["algorithm.name=fedrod"]),
    "ditto": ("Ditto (mu 0.1)", ["algorithm.name=ditto", "algorithm.mu=0.1"]),
    "apfl": ("APFL", ["algorithm.name=apfl"]),
    "perfedavg": ("Per-FedAvg", ["algorithm.name=perfedavg"]),
    "cwfedavg": ("cwFedAvg", ["algorithm.name=cwfedavg"]),
    "ifca": ("IFCA (2 clusters)", ["algorithm.name=ifca", "algorithm.clusters=2"]),
}
PARTITIONS: dict[str, tuple[str, list[str]]] = {
    "pat": ("pathological, 2 classes/client",
            ["data.partition.name=pathological", "data.partition.classes_per_client=2"]),
    "dir": ("practical, Dir(0.1)", ["data.partition.name=dirichlet", "data.partition.alpha=0.1"]),
}  # fmt: skip


def run_one(partition: str, row: str, seed: int, out: Path, extra: list[str]) -> tuple[float, int]:
    """One run in a fresh single-threaded process; (seconds, return code); (0, 0): done."""
    run_dir = out / f"{partition}-{row}-s{seed}"
    if (run_dir / "summary.json").is_file():
        return 0.0, 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "fedsim.cli", "run", str(CONFIG), *PARTITIONS[partition][1],
        *ROWS[row][1], f"seed={seed}", f"name={run_dir.name}", *extra,
        "--out", str(run_dir), "--no-progress",
    ]  # fmt: skip
    began = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if proc.returncode == 0:
        (run_dir / "wall_seconds.txt").write_text(f"{seconds:.1f}\n")
    else:
        print(f"FAILED {run_dir.name}: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    return seconds, proc.returncode


def finished(out: Path) -> dict[tuple[str, str], list[Path]]:
    found: dict[tuple[str, str], list[Path]] = defaultdict(list)
    for summary in sorted(out.glob("*-s*/summary.json")):
        partition, _, rest = summary.parent.name.partition("-")
        found[(partition, rest.rpartition("-s")[0])].append(summary.parent)
    return found


def moved(run_dir: Path, key: str, span: int = 10) -> float:
    """How much ``key`` changed over the last ``span`` rounds (final minus then)."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [m for m in lines if key in m]
    last = rows[-1]
    earlier = [m for m in rows if m["round"] <= last["round"] - span] or rows[:1]
    return last[key] - earlier[-1][key]


def table(out: Path) -> str:
    found = finished(out)
    head = ("| partition | method | seeds | rounds | seen acc | unseen acc | unseen worst 10 % "
            "| participation gap | seen moved, last 10 | unseen moved, last 10 "
            "| min/run |")  # fmt: skip
    lines = [head, "|" + "---|" * 11]
    for partition, (partition_name, _) in PARTITIONS.items():
        for row, (row_name, _) in ROWS.items():
            runs = found.get((partition, row))
            if not runs:
                continue
            finals = [json.loads((r / "summary.json").read_text())["final"] for r in runs]
            rounds = ",".join(sorted({str(f["round"]) for f in finals}))
            cells = [mean_std_cell([f[k] for f in finals]) for k in
                     ("acc_weighted", "unseen/acc_weighted", "unseen/acc_worst10",
                      "participation_gap")]  # fmt: skip
            cells += [mean_std_cell([moved(r, k) for r in runs])
                      for k in ("acc_weighted", "unseen/acc_weighted")]  # fmt: skip
            walls = [float((r / "wall_seconds.txt").read_text()) / 60 for r in runs
                     if (r / "wall_seconds.txt").is_file()]  # fmt: skip
            minutes = f"{min(walls):.1f}-{max(walls):.1f}" if walls else "?"
            lines.append(f"| {partition_name} | {row_name} | {len(runs)} | {rounds} | "
                         + " | ".join(cells) + f" | {minutes} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", nargs="+", default=list(PARTITIONS), choices=PARTITIONS)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one core each)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "generalization")
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("overrides", nargs="*", help="key=value for every run (rounds=...)")
    args = parser.parse_args(argv)
    if not args.table_only:
        args.out.mkdir(parents=True, exist_ok=True)
        jobs = [(p, r, s) for s in args.seeds for r in args.rows for p in args.partitions]
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run_one, p, r, s, args.out, args.overrides) for p, r, s in jobs]
            for (p, r, s), future in zip(jobs, futures, strict=True):
                seconds, code = future.result()
                if seconds:
                    print(f"{p}-{r}-s{s}: {seconds:.0f} s" + (" FAILED" if code else ""),
                          flush=True)  # fmt: skip
    print(table(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
