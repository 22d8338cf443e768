"""Asynchronous (FedBuff, FedAsync) vs synchronous FedAvg against simulated time.

    python benchmarks/async_vs_sync.py --seeds 0 1 2 --out benchmarks/results/robustness.md

mnist-5k split IID over 10 clients, FedAvg (lr 0.05, batch 10, one local epoch), 30% of the
clients 4x slower (``system.speeds=slow_fraction:0.3,4``). A client round takes
(training samples x slowdown) units of virtual time; tau is the median of that over clients.
The synchronous run samples every client every round, so each round waits for a slow client
(4 tau); it runs ``--sync-rounds`` rounds. Each asynchronous run gets as many aggregations
as it needs to reach the same simulated time (its schedule is fixed by the seed, so the
count is known before training). Accuracy at a budget T is that of the newest model the
server held at time T (the last evaluation with ``sim_time`` <= T). Asynchronous runs do
more client work in the same simulated time (fast clients never wait), which is their point;
the table says how many client updates each used.

Writes the table between the markers below into ``--out`` (replacing an earlier one; the
text after the end marker, what the numbers show, is written by hand and kept) and the
figure ``async_vs_sync.png`` next to it. Ends with ``RESULT`` lines: accuracy at each budget
and, against the synchronous run measured in the same invocation, the simulated time each
method needs to reach sync's final accuracy as a fraction of sync's time.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
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

START, END = "<!-- async_vs_sync: start -->", "<!-- async_vs_sync: end -->"
BASE = [
    "data.name=mnist-5k",
    "data.num_clients=10",
    "data.partition.name=iid",
    "client.lr=0.05",
    "runtime.executor=local",
    "runtime.device=cpu",
    "system.speeds=slow_fraction:0.3,4",
]
ASYNC = ["asynchronous.enabled=true"]
METHODS = {
    "sync FedAvg": [],
    "FedBuff K=5, stale: discount": [*ASYNC, "asynchronous.buffer_size=5"],
    "FedBuff K=5, stale: drop": [*ASYNC, "asynchronous.buffer_size=5", "asynchronous.stale=drop"],
    "FedAsync (K=1), alpha 1": [*ASYNC, "asynchronous.buffer_size=1"],
    "FedAsync (K=1), alpha 0.25": [
        *ASYNC,
        "asynchronous.buffer_size=1",
        "algorithm.server_lr=0.25",
    ],
}
BUDGETS_TAU = (4, 8, 12, 24)  # simulated-time budgets in tau (a sync round here is 4 tau)


def slug(method: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=]+", "_", method).strip("_")


def time_to(rows: list[tuple[float, float, int]], accuracy: float) -> float:
    """Simulated time (tau) of the first evaluation at or above ``accuracy`` (inf: never)."""
    return next((t for t, acc, _ in rows if acc >= accuracy), float("inf"))


def durations(sim: Simulation) -> np.ndarray:
    """Each client's round in virtual time (asynchronous runs and sync runs with speeds)."""
    kind = sim.round_kind
    return kind.plan.durations if hasattr(kind, "plan") else kind.clock.compute


def tau_of(sim: Simulation) -> float:
    return float(np.median(durations(sim)))


def run(method: str, seed: int, sync_rounds: int, cache: str | None = None) -> dict:
    """One run: (sim_time in tau, accuracy, client updates so far) per evaluated round.

    With ``cache`` (a folder) a finished run is read back instead of run again."""
    stored = None
    if cache:
        stored = Path(cache) / f"{slug(method)}-s{seed}-r{sync_rounds}.json"
        if stored.is_file():
            return json.loads(stored.read_text())
    torch.set_num_threads(1)
    cfg = load_config(None, [*BASE, f"seed={seed}", *METHODS[method]])
    cfg.rounds, cfg.eval_every = sync_rounds, 1
    sim = Simulation(cfg)
    tau = tau_of(sim)
    if cfg.asynchronous.enabled:  # aggregations until the sync run's simulated time
        horizon = sync_rounds * durations(sim).max()  # every client, every sync round
        schedule, rounds = sim.round_kind.plan.schedule(), 0
        while schedule.time < horizon:
            schedule.next_aggregation()
            rounds += 1
        cfg.rounds, cfg.eval_every = rounds, max(1, rounds // (6 * sync_rounds))
    began = time.perf_counter()
    result = sim.run(LocalExecutor(sim.worker_spec, sim.data))
    updates, rows = 0, []
    for h in result.history:
        if "acc_weighted" in h:
            rows.append((h["sim_time"] / tau, h["acc_weighted"], updates))
        updates += h.get("num_trained", 0)
    stale = sum(h.get("stale", 0) for h in result.history)
    dropped = sum(h.get("stale_dropped", 0) for h in result.history)
    out = {
        "rows": rows,
        "rounds": cfg.rounds,
        "updates": updates,
        "stale": stale,
        "dropped": dropped,
        "seconds": time.perf_counter() - began,
    }
    if stored is not None:
        stored.parent.mkdir(parents=True, exist_ok=True)
        stored.write_text(json.dumps(out))
    return out


def at_budget(rows: list[tuple[float, float, int]], budget: float) -> tuple[float, int]:
    """(accuracy, client updates) of the newest model the server held at time ``budget``."""
    held = [r for r in rows if r[0] <= budget + 1e-9]
    return held[-1][1], held[-1][2]


def plot(runs: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_time, by_work) = plt.subplots(1, 2, figsize=(11, 4))
    for i, (method, seeds) in enumerate(runs.items()):
        for j, r in enumerate(seeds):
            t, acc, work = (np.array(v) for v in zip(*r["rows"], strict=True))
            label = method if j == 0 else None
            # the newest model the server holds: a step until the next evaluation
            by_time.step(t, acc, where="post", color=f"C{i}", alpha=0.8, lw=1, label=label)
            by_work.plot(work, acc, color=f"C{i}", alpha=0.8, lw=1, label=label)
    by_time.set_xlabel("simulated time (tau = median client round time)")
    by_work.set_xlabel("client updates trained")
    for ax in (by_time, by_work):
        ax.set_ylabel("test accuracy (weighted)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("mnist-5k, 10 IID clients, 30% 4x slower: one line per seed", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def section(runs: dict[str, list[dict]], seeds: list[int], sync_rounds: int, plot_name: str) -> str:
    head = " | ".join(f"T = {b} tau" for b in BUDGETS_TAU)
    intro = (
        f"`python benchmarks/async_vs_sync.py --seeds {' '.join(map(str, seeds))} "
        f"--sync-rounds {sync_rounds}`. mnist-5k (5,000 digits) IID over 10 clients, "
        "FedAvg (lr 0.05, batch 10, one local epoch), 30% of the clients (3 of 10) 4x slower "
        "(`system.speeds=slow_fraction:0.3,4`); a client round takes its training "
        "samples x slowdown in virtual time, tau is the median over clients (375 samples), so "
        "a synchronous round, which waits for every client, lasts 4 tau. Asynchronous runs "
        "keep all 10 clients in flight (`asynchronous.concurrency` = the cohort), with the "
        "default staleness discount (1 + s)^-1/2 and `max_staleness` 2 tau; they run until "
        "the synchronous run's last simulated time. Weighted test accuracy (%) of the newest "
        f"model the server held at each budget, mean ± std over seeds "
        f"{', '.join(map(str, seeds))}; in brackets the client updates trained by then "
        "(mean), i.e. the compute spent."
    )
    lines = [
        START,
        "## Asynchronous vs synchronous rounds against simulated time",
        "",
        textwrap.fill(intro, width=92, break_on_hyphens=False),
        "",
        f"| method | {head} | stale updates (dropped) |",
        "|---|" + "---|" * (len(BUDGETS_TAU) + 1),
    ]
    for method, seed_runs in runs.items():
        cells = []
        for budget in BUDGETS_TAU:
            points = [at_budget(r["rows"], budget) for r in seed_runs]
            work = np.mean([p[1] for p in points])
            cells.append(f"{mean_std_cell([p[0] for p in points])} ({work:.0f})")
        stale = np.mean([r["stale"] for r in seed_runs])
        dropped = np.mean([r["dropped"] for r in seed_runs])
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {stale:.0f} ({dropped:.0f}) |")
    lines += ["", f"Plot: `benchmarks/results/{plot_name}`.", END]  # what it shows: below END
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    old = path.read_text() if path.is_file() else ""
    if START in old and END in old:
        before, rest = old.split(START, 1)
        after = rest.split(END, 1)[1]
        new = before + text + after
    else:
        new = old.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(new)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sync-rounds", type=int, default=6)
    parser.add_argument("--out", default=None, help="write the section into this markdown file")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one thread each)")
    parser.add_argument("--cache", default=None, help="folder keeping each finished run")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    began = time.perf_counter()
    runs: dict[str, list[dict]] = {m: [] for m in METHODS}
    jobs = [(m, seed) for seed in args.seeds for m in METHODS]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
        futures = [pool.submit(run, m, s, args.sync_rounds, args.cache) for m, s in jobs]
        for (method, seed), future in zip(jobs, futures, strict=True):
            r = future.result()
            runs[method].append(r)
            final = r["rows"][-1]
            print(
                f"seed {seed} {method}: {r['rounds']} rounds, {r['updates']} updates, "
                f"final acc {final[1]:.3f} at {final[0]:.1f} tau, {r['seconds']:.0f} s",
                flush=True,
            )
    sync = runs["sync FedAvg"]
    horizon = sync[0]["rows"][-1][0]
    for method, seed_runs in runs.items():
        accs = [np.mean([at_budget(r["rows"], b)[0] for r in seed_runs]) for b in BUDGETS_TAU]
        # against the reference measured in the same run: sync's final accuracy and its time
        ratios = [
            time_to(r["rows"], ref["rows"][-1][1]) / horizon
            for r, ref in zip(seed_runs, sync, strict=True)
        ]
        print(
            f"RESULT {slug(method)} acc_at_{'_'.join(map(str, BUDGETS_TAU))}_tau="
            + ",".join(f"{a:.4f}" for a in accs)
            + f" time_to_sync_final_acc_vs_sync={np.mean(ratios):.3f}"
        )
    if args.out:
        out = Path(args.out)
        plot_name = "async_vs_sync.png"
        plot(runs, out.parent / plot_name)
        write_section(out, section(runs, args.seeds, args.sync_rounds, plot_name))
    print(f"({time.perf_counter() - began:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
