"""Synchronous rounds as deployed (over-selection, a deadline) and FedBuff, under one
trace-driven population of devices with dropouts, against virtual time.

    python benchmarks/system.py --seeds 0 1 2 --jobs 2 --out benchmarks/results/system.md

mnist-5k over 20 clients, Dirichlet(0.5) labels, FedAvg's CNN. Each client is one device of
``benchmarks/traces/devices.csv`` (50 devices, 30 % of them 4x slower at compute and at a
quarter of the bandwidth; a seeded draw maps clients onto devices), and 20 % of the clients
that start a round drop out of it (``system.dropout=0.2``). Synchronous rounds need K = 10
reports (``join_ratio=0.5``): plain, they wait for every sampled client that does not drop;
deployed, they sample ceil(1.3 K) and keep the first K within a deadline of 3x the median
client's round. FedBuff keeps 10 clients in flight and aggregates every 5 arrivals.

Two tables: compute time only (``devices-compute.csv``: the same devices, no network time),
and compute and network time (synchronous rounds time the bytes each client really sends;
FedBuff's schedule, fixed before training, a full model each way). Accuracy at a
budget T is that of the newest model the server held at T; time to accuracy is the first
evaluation at or above it. Every run gets the plain synchronous FedAvg run's final virtual
time of the same seed as its horizon: synchronous methods run the same rounds (the deployed
ones finish earlier and hold their last model), FedBuff as many aggregations as reach it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

from fedsim.config import load_config
from fedsim.runtime.executor import LocalExecutor
from fedsim.search.stats import mean_std_cell
from fedsim.simulation import Simulation

HERE = Path(__file__).resolve().parent
START, END = "<!-- system: start -->", "<!-- system: end -->"
TARGET = 0.8  # the accuracy whose virtual time the tables report
BASE = [
    "data.name=mnist-5k",
    "data.num_clients=20",
    "data.partition.name=dirichlet",
    "data.partition.alpha=0.5",
    "client.lr=0.05",
    "join_ratio=0.5",
    "runtime.executor=local",
    "runtime.device=cpu",
    "system.dropout=0.2",
    f"eval.target_acc=[{TARGET}]",
]
DEPLOYED = ["system.overcommit=1.3", "system.deadline={deadline}"]
FEDPROX = ["algorithm.name=fedprox", "algorithm.mu=0.01"]
FEDBUFF = ["asynchronous.enabled=true", "asynchronous.buffer_size=5"]
METHODS = {
    "FedAvg, plain sync": [],
    "FedAvg, 1.3x over-selection + deadline": DEPLOYED,
    "FedProx, plain sync": FEDPROX,
    "FedProx, 1.3x over-selection + deadline": [*FEDPROX, *DEPLOYED],
    "FedBuff (K=5, C=10)": FEDBUFF,
}
TRACES = {"compute": "devices-compute.csv", "network": "devices.csv"}


def config(method: str, seed: int, trace: str, rounds: int, deadline: float | None = None):
    options = [o.format(deadline=deadline) for o in METHODS[method]]
    path = HERE / "traces" / TRACES[trace]
    cfg = load_config(None, [*BASE, f"seed={seed}", f"rounds={rounds}",
                             f"system.device_trace={path}", *options])  # fmt: skip
    return cfg


def median_round(seed: int, trace: str) -> float:
    """The median client's round (download + compute + upload of a full model), seconds."""
    sim = Simulation(config("FedAvg, plain sync", seed, trace, 1))
    clock = sim.round_kind.clock
    model = 4 * sim.initial_params.numel()
    return float(np.median([clock.report_time(c, model, model) for c in range(20)]))


def run(method: str, seed: int, trace: str, rounds: int, horizon: float | None) -> dict:
    """One run: (sim_time, acc_weighted, acc_worst10, client updates so far) per evaluation."""
    torch.set_num_threads(1)
    deadline = 3 * median_round(seed, trace)
    cfg = config(method, seed, trace, rounds, deadline)
    sim = Simulation(cfg)
    if cfg.asynchronous.enabled:  # aggregations until the plain run's horizon
        schedule, count = sim.round_kind.plan.schedule(), 0
        while schedule.time < horizon:
            schedule.next_aggregation()
            count += 1
        cfg.rounds, cfg.eval_every = count, max(1, count // (2 * rounds))
        sim = Simulation(cfg)
    began = time.perf_counter()
    pool = LocalExecutor(sim.worker_spec, sim.data)
    try:
        result = sim.run(pool)
    finally:
        pool.close()
    rows, updates = [], 0
    for h in result.history:
        if "acc_weighted" in h:
            rows.append((h["sim_time"], h["acc_weighted"], h["acc_worst10"], updates))
        updates += h.get("num_trained", 0)
    counted = ("dropouts", "late", "surplus", "skipped")
    totals = {k: int(sum(h.get(k, 0) or 0 for h in result.history)) for k in counted}
    return {"rows": rows, "rounds": cfg.rounds, "updates": updates, "deadline": deadline,
            "seconds": time.perf_counter() - began, **totals}  # fmt: skip


def at_budget(rows: list, budget: float) -> tuple[float, float]:
    """(accuracy, worst-10% accuracy) of the newest model held at ``budget``."""
    held = [r for r in rows if r[0] <= budget * (1 + 1e-9)]
    return held[-1][1], held[-1][2]


def time_to(rows: list, accuracy: float) -> float:
    return next((r[0] for r in rows if r[1] >= accuracy), float("inf"))


def table(runs: dict[str, list[dict]], horizons: list[float]) -> list[str]:
    lines = [
        f"| method | acc at T/2 | acc at T | worst-10% at T | time to {TARGET:.0%} (x T) | "
        "client updates | dropouts / late / surplus per run |",
        "|---|---|---|---|---|---|---|",
    ]
    for method, seed_runs in runs.items():
        half = [at_budget(r["rows"], h / 2)[0] for r, h in zip(seed_runs, horizons, strict=True)]
        full = [at_budget(r["rows"], h) for r, h in zip(seed_runs, horizons, strict=True)]
        times = [time_to(r["rows"], TARGET) / h for r, h in zip(seed_runs, horizons, strict=True)]
        reached = [t for t in times if np.isfinite(t)]
        when = mean_std_cell(reached, scale=1.0) if reached else "never"
        if 0 < len(reached) < len(times):
            when += f" ({len(reached)}/{len(times)} seeds)"
        counts = " / ".join(f"{np.mean([r[k] for r in seed_runs]):.0f}"
                            for k in ("dropouts", "late", "surplus"))  # fmt: skip
        lines.append(
            f"| {method} | {mean_std_cell(half)} | {mean_std_cell([f[0] for f in full])} | "
            f"{mean_std_cell([f[1] for f in full])} | {when} | "
            f"{np.mean([r['updates'] for r in seed_runs]):.0f} | {counts} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=20, help="synchronous rounds")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one thread each)")
    parser.add_argument("--out", default=None, help="write the tables into this markdown file")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    sections = []
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
        for trace in TRACES:
            methods = list(METHODS)
            plain = {s: pool.submit(run, methods[0], s, trace, args.rounds, None)
                     for s in args.seeds}  # fmt: skip
            plain_runs = {s: f.result() for s, f in plain.items()}
            horizons = [plain_runs[s]["rows"][-1][0] for s in args.seeds]
            futures = {(m, s): pool.submit(run, m, s, trace, args.rounds, h)
                       for m in methods[1:] for s, h in zip(args.seeds, horizons, strict=True)}
            runs = {methods[0]: [plain_runs[s] for s in args.seeds]}
            for (method, _seed), future in futures.items():
                runs.setdefault(method, []).append(future.result())
            for method, seed_runs in runs.items():
                for seed, r in zip(args.seeds, seed_runs, strict=True):
                    print(f"{trace} seed {seed} {method}: {r['rounds']} rounds, final acc "
                          f"{r['rows'][-1][1]:.3f} at t={r['rows'][-1][0]:.0f} s, "
                          f"{r['seconds']:.0f} s", flush=True)  # fmt: skip
                print(f"RESULT {trace} {method}: time_to_{TARGET} = "
                      f"{np.mean([time_to(r['rows'], TARGET) for r in seed_runs]):.1f} s")
            sections.append((trace, table(runs, horizons), horizons))
    if args.out:
        write(Path(args.out), sections, args)
    print(f"({time.perf_counter() - began:.0f} s)", file=sys.stderr)
    return 0


def write(path: Path, sections: list, args: argparse.Namespace) -> None:
    seeds = " ".join(map(str, args.seeds))
    intro = textwrap.fill(
        f"`python benchmarks/system.py --seeds {seeds} --rounds {args.rounds}`. "
        + " ".join(__doc__.split("\n\n")[2:]).replace("\n", " ").replace("``", "`"),
        width=92, break_on_hyphens=False,
    )  # fmt: skip
    lines = [START, "## Clients in time: over-selection, deadlines and FedBuff", "", intro, ""]
    titles = {"compute": "Compute time only", "network": "Compute and network time"}
    for trace, rows, horizons in sections:
        note = (f"T (the plain FedAvg run's last virtual time), seeds {seeds}: "
                + ", ".join(f"{h:,.0f} s" for h in horizons) + ". Accuracies in %, mean ± "
                "std over seeds.")  # fmt: skip
        lines += [f"### {titles[trace]}", "", textwrap.fill(note, width=92), "", *rows, ""]
    lines.append(END)
    text = "\n".join(lines)
    old = path.read_text() if path.is_file() else "# Clients in time\n"
    if START in old and END in old:
        before, rest = old.split(START, 1)
        text = before + text + rest.split(END, 1)[1]
    else:
        text = old.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
