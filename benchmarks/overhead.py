"""Overhead of fedsim against plain PyTorch doing exactly the same client work.

FedAvgCNN on Fashion-MNIST, every client sampled every round: each client evaluates the
model it receives on its test split, then trains one epoch (batch 10, SGD), and the server
averages. Two workloads by default, measured in turn: 100 clients (Dirichlet 0.5, ~525 train
samples each) and 1,000 tiny clients (IID, 52 train samples each), where the per-client path
is all that shows. Four ways, same data, same seeds:

  (a) fedsim, Ray executor, W worker actors (one thread each)
  (b) fedsim, local executor, in process, torch's default threads
  (c) plain PyTorch loop (no Lightning, no Ray), one process, torch's default threads
  (d) the ideal: the plain loop split over W OS processes (one thread each), same split as (a)

Prints wall seconds per round, the ratios, and where (a) spends the time that is not client
compute. Round 0 is a warm-up; the figures are the median of the rounds after it. On a
shared machine use ``--passes 2`` or more: the ways are repeated and each keeps its fastest
pass. CPU seconds per round are printed too (less sensitive to other users' load). One line
per workload at the end:
``RESULT clients=<n> ray_vs_ideal=<a/d> ray_vs_plain=<a/c> outside_training=<fraction of (a)>
sum_share=<fraction>``: outside_training counts what the ideal does not do (Ray calls, waiting on
the slower worker, bookkeeping); adding each client's parameters into the worker's float64
sum is aggregation the ideal pays too, reported on its own as sum_share.

    .venv/bin/python benchmarks/overhead.py [--rounds 4] [--workers W] [--clients 100,1000]
        [--partition auto|dirichlet|iid] [--ways adcb] [--passes 1] [--algorithm fedavg]

``--algorithm fedprox``: the same with a client term on every step (FedProx's proximal term,
mu 0.01, added by fedsim's loop to the module's loss; the plain loop adds it by hand), so
the cost of applying an algorithm's terms around ``training_step`` is measured too.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
from typing import Any

import numpy as np
import psutil
import torch
from torch import nn

from fedsim.config import ExperimentConfig, load_config
from fedsim.data.federated import FederatedData
from fedsim.runtime.executor import Executor
from fedsim.runtime.factory import make_executor
from fedsim.runtime.scheduling import assign_balanced
from fedsim.runtime.worker import ClientTask, Task, WorkerResult
from fedsim.simulation import Simulation, build_data
from fedsim.streams import torch_seed


def partition_name(args: argparse.Namespace) -> str:
    """``auto``: Dirichlet 0.5 up to 100 clients; IID beyond (1,000 tiny clients of ~52
    train samples each: Dirichlet draws cannot give every one of them enough samples)."""
    if args.partition != "auto":
        return args.partition
    return "dirichlet" if args.clients <= 100 else "iid"


def partition_keys(args: argparse.Namespace) -> list[str]:
    if partition_name(args) == "iid":
        return ["data.partition.name=iid"]
    return ["data.partition.name=dirichlet", "data.partition.alpha=0.5"]


PROX_MU = 0.01


def experiment(args: argparse.Namespace, executor: str, cpus_per_worker: int) -> ExperimentConfig:
    return load_config(
        None,
        [
            "name=overhead",
            "data.name=fashion-mnist",
            "data.download=false",
            f"data.num_clients={args.clients}",
            *partition_keys(args),
            f"rounds={args.rounds}",
            "join_ratio=1.0",
            "eval_every=1",
            "client.epochs=1",
            "client.batch_size=10",
            "client.lr=0.005",
            f"algorithm.name={args.algorithm}",
            *([f"algorithm.mu={PROX_MU}"] if args.algorithm == "fedprox" else []),
            f"runtime.executor={executor}",
            f"runtime.workers={args.workers if executor == 'ray' else 'null'}",
            f"runtime.cpus_per_worker={cpus_per_worker}",
        ],
    )


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and every live descendant (Ray, pool)."""
    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


# ------------------------------------------------------------------ fedsim (a), (b)


class Recording(Executor):
    """Wraps an executor; keeps each round's call time and per-worker results."""

    def __init__(self, inner: Executor):
        self.inner, self.num_workers = inner, inner.num_workers
        self.calls: list[tuple[float, list[WorkerResult]]] = []
        self.cpu_marks: list[float] = []  # CPU seconds at the start of each round's call

    def run_round(
        self, round_idx: int, broadcast: dict[str, Any], tasks: list[Task]
    ) -> list[WorkerResult]:
        self.cpu_marks.append(cpu_seconds())
        began = time.perf_counter()
        results = self.inner.run_round(round_idx, broadcast, tasks)
        self.calls.append((time.perf_counter() - began, results))
        return results

    def close(self) -> None:
        self.inner.close()


def run_fedsim(cfg: ExperimentConfig, data: FederatedData) -> dict[str, Any]:
    sim = Simulation(cfg, data)
    began = time.perf_counter()
    executor = Recording(make_executor(cfg.runtime, sim.worker_spec, sim.data))
    startup = time.perf_counter() - began
    try:
        result = sim.run(executor)
    finally:
        executor.close()
    rounds = cfg.rounds  # training rounds; round `rounds` is the final evaluation only
    return {
        "startup": startup,
        "round_seconds": [result.history[r]["seconds"] for r in range(rounds)],
        "calls": executor.calls[:rounds],
        "cpu_marks": executor.cpu_marks,
        "workers": executor.num_workers,
        "params": result.state["params"],
        "acc": result.summary["final"]["acc_weighted"],
    }


# ------------------------------------------------------------------ plain PyTorch (c), (d)


class PlainCNN(nn.Module):
    """FedAvgCNN's layers as a plain nn.Module (same parameter order)."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, image_size: int = 28):
        super().__init__()
        side = ((image_size - 4) // 2 - 4) // 2
        self.conv1 = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=5), nn.ReLU(inplace=True), nn.MaxPool2d(2)
        )
        self.conv2 = nn.Sequential(
            nn.Conv2d(32, 64, kernel_size=5), nn.ReLU(inplace=True), nn.MaxPool2d(2)
        )
        self.fc1 = nn.Sequential(nn.Linear(64 * side * side, 512), nn.ReLU(inplace=True))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv2(self.conv1(x))
        return self.fc(self.fc1(torch.flatten(x, 1)))


def channels_last(x: torch.Tensor) -> torch.Tensor:
    """Images in channels-last order: oneDNN's faster kernels (what fedsim's workers do)."""
    n, c, h, w = x.shape
    if c == 1:
        return x.contiguous().as_strided(x.shape, (h * w, 1, w, 1))
    return x.contiguous(memory_format=torch.channels_last)


@torch.no_grad()
def load_params(model: nn.Module, flat: torch.Tensor) -> None:
    """Copy a flat vector into the parameters (``vector_to_parameters`` would alias it)."""
    offset = 0
    for p in model.parameters():
        p.copy_(flat[offset : offset + p.numel()].view_as(p))
        offset += p.numel()


def plain_share(
    model: PlainCNN,
    data: FederatedData,
    clients: list[int],
    params: torch.Tensor,
    round_idx: int,
    cfg: ExperimentConfig,
) -> tuple[np.ndarray, float, int]:
    """Evaluate then train each client from ``params``; the weighted sum of trained models."""
    total = torch.zeros(params.numel(), dtype=torch.float64)
    weight, correct = 0.0, 0
    for client in clients:
        split = data.clients[client]
        load_params(model, params)
        model.eval()
        with torch.no_grad():
            for start in range(0, len(split.test), cfg.client.eval_batch_size):
                x, y = data.batch(split.test[start : start + cfg.client.eval_batch_size])
                logits = model(channels_last(x))
                correct += int((logits.argmax(1) == y).sum())
                float(nn.functional.cross_entropy(logits, y, reduction="sum"))
        model.train()
        seed = torch_seed(cfg.seed, round_idx, client)
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.client.lr)
        n, bs = len(split.train), cfg.client.batch_size
        order = split.train[torch.randperm(n, generator=generator).numpy()]
        prox = cfg.algorithm.name == "fedprox"
        anchor = [p.detach().clone() for p in model.parameters()] if prox else None
        for start in range(0, n, bs):
            x, y = data.batch(order[start : start + bs])
            loss = nn.functional.cross_entropy(model(channels_last(x)), y)
            if anchor is not None:  # FedProx: (mu/2) ||w - w_global||^2, as fedsim's term
                pairs = zip(model.parameters(), anchor, strict=True)
                pulled = sum((p - a).pow(2).sum() for p, a in pairs)
                loss = loss + 0.5 * PROX_MU * torch.as_tensor(pulled)
            float(loss.detach())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        trained = nn.utils.parameters_to_vector(model.parameters()).detach()
        total.add_(trained.to(torch.float64) * float(n))
        weight += float(n)
    return total.numpy(), weight, correct


def plain_round_loop(
    run_share: Any, shares: list[list[int]], params: torch.Tensor, rounds: int
) -> tuple[list[float], torch.Tensor, list[float]]:
    """FedAvg rounds; ``run_share(shares, params, round)`` returns per-share weighted sums.

    Returns wall seconds per round, the final parameters and CPU marks at each round start
    (plus one at the end)."""
    seconds, cpu_marks = [], []
    for round_idx in range(rounds):
        cpu_marks.append(cpu_seconds())
        began = time.perf_counter()
        parts = run_share(shares, params, round_idx)
        total, weight = sum(p[0] for p in parts), sum(p[1] for p in parts)
        params = torch.from_numpy(total / weight).to(torch.float32)
        seconds.append(time.perf_counter() - began)
    cpu_marks.append(cpu_seconds())
    return seconds, params, cpu_marks


_PROCESS: dict[str, Any] = {}


def _process_init(cfg: ExperimentConfig) -> None:
    """(d) worker process: one thread, its own copy of the data and model."""
    torch.set_num_threads(1)
    _PROCESS.update(cfg=cfg, data=build_data(cfg), model=PlainCNN())


def _process_share(job: tuple[list[int], np.ndarray, int]) -> tuple[np.ndarray, float, int]:
    clients, params, round_idx = job
    model, data, cfg = _PROCESS["model"], _PROCESS["data"], _PROCESS["cfg"]
    return plain_share(model, data, clients, torch.from_numpy(params), round_idx, cfg)


# ------------------------------------------------------------------ main


def client_shares(data: FederatedData, cfg: ExperimentConfig, workers: int) -> list[list[int]]:
    """The split fedsim's Ray executor makes (same costs, largest first)."""
    from fedsim.run_plan import LocalEpochs
    from fedsim.runtime.task_cost import task_cost

    tasks = [ClientTask(c, {}, None, evaluate=True, train=True) for c in range(data.num_clients)]
    epochs = LocalEpochs.from_config(cfg)
    costs = [task_cost(t, data.train_sizes(), data.test_sizes(), epochs) for t in tasks]
    return assign_balanced(costs, workers)


def steady(values: list[float]) -> float:
    """Median over the rounds after the first (warm-up) one."""
    return statistics.median(values[1:] if len(values) > 1 else values)


WAY_NAMES = {"a": "fedsim + Ray", "b": "fedsim, local", "c": "plain, 1 process", "d": "ideal"}


def run_way(
    way: str, args: argparse.Namespace, data: FederatedData, default_threads: int
) -> dict[str, Any]:
    """One way, ``args.rounds`` rounds: wall seconds per round, CPU marks, final params."""
    cfg_ray = experiment(args, "ray", 1)
    if way in "ab":
        cfg = cfg_ray if way == "a" else experiment(args, "local", default_threads)
        out = run_fedsim(cfg, data)
        torch.set_num_threads(default_threads)
        return out
    template = Simulation(cfg_ray, data).initial_params
    if way == "c":
        torch.set_num_threads(default_threads)
        model = PlainCNN()

        def run_inline(shares: list[list[int]], params: torch.Tensor, r: int) -> list:
            return [plain_share(model, data, share, params, r, cfg_ray) for share in shares]

        clients = [list(range(data.num_clients))]
        seconds, params, marks = plain_round_loop(run_inline, clients, template, args.rounds)
        return {"round_seconds": seconds, "cpu_marks": marks, "params": params}
    shares = client_shares(data, cfg_ray, args.workers)
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.workers, initializer=_process_init, initargs=(cfg_ray,)) as pool:
        pool.map(_process_share, [([], template.numpy(), 0)] * args.workers)  # started

        def run_processes(shares: list[list[int]], params: torch.Tensor, r: int) -> list:
            return pool.map(_process_share, [(s, params.numpy(), r) for s in shares], chunksize=1)

        seconds, params, marks = plain_round_loop(run_processes, shares, template, args.rounds)
    return {"round_seconds": seconds, "cpu_marks": marks, "params": params}


def report_ray_breakdown(a: dict[str, Any], rounds: int) -> tuple[float, float]:
    """Print where (a) spends time that is not client compute; return (the fraction outside
    client compute and the float64 sum, the sum's fraction), of the median steady round.

    Adding a client's parameters into the worker's float64 sum is aggregation work the ideal
    (d) pays too, so it is not counted as overhead: ``outside_training`` is Ray calls,
    waiting on the slower worker and bookkeeping other than the sum."""
    steady_rounds = range(1, rounds) if rounds > 1 else range(rounds)
    calls = [a["calls"][r] for r in steady_rounds]
    wall = sum(a["round_seconds"][r] for r in steady_rounds)
    call = sum(c[0] for c in calls)
    compute = sum(sum(w.compute_seconds for w in c[1]) for c in calls)
    summed = sum(sum(w.sum_seconds for w in c[1]) for c in calls)
    busy_max = sum(max(w.busy_seconds for w in c[1]) for c in calls)
    compute_max = sum(max(w.compute_seconds for w in c[1]) for c in calls)
    busy_sum = sum(sum(w.busy_seconds for w in c[1]) for c in calls)
    workers = a["workers"]

    def share(r: int, key: str) -> float:
        return sum(getattr(w, key) for w in a["calls"][r][1]) / (workers * a["round_seconds"][r])

    outside = statistics.median(
        1.0 - share(r, "compute_seconds") - share(r, "sum_seconds") for r in steady_rounds
    )  # the median steady round, like the wall ratios
    sum_share = statistics.median(share(r, "sum_seconds") for r in steady_rounds)
    print(f"\n(a) over {len(calls)} steady rounds: wall {wall:.2f} s")
    print(f"    driver (sampling, payloads, aggregation, metrics): {wall - call:.3f} s")
    print(f"    Ray call beyond the slowest worker (transfer, scheduling): {call - busy_max:.3f} s")
    print(
        "    in-worker bookkeeping other than the sum (client_start/finish, copies): "
        f"{(busy_sum - compute - summed) / workers:.3f} s per worker"
    )
    print(
        f"    the float64 sum of client updates (the ideal pays it too): {summed / workers:.3f} s "
        f"per worker, {sum_share:.3%} of the median round"
    )
    print(f"    waiting on the slowest worker (imbalance): {compute_max - compute / workers:.3f} s")
    print(f"    outside client compute and the sum: median round {outside:.3%}")
    return outside, sum_share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--clients", default="100,1000", help="comma-separated workloads, measured in turn"
    )
    parser.add_argument("--partition", choices=("auto", "dirichlet", "iid"), default="auto")
    parser.add_argument("--ways", default="adcb", help="which ways, in this order")
    parser.add_argument(
        "--passes", type=int, default=1, help="repeat the ways; each way keeps its best pass"
    )
    parser.add_argument(
        "--algorithm", choices=("fedavg", "fedprox"), default="fedavg",
        help="fedprox: a client term on every step (the loop's terms cost)",
    )  # fmt: skip
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    results = []
    for clients in [int(c) for c in args.clients.split(",")]:
        results.append(measure(argparse.Namespace(**{**vars(args), "clients": clients})))
    print("\n" + "\n".join(results))


def measure(args: argparse.Namespace) -> str:
    """Every way on one workload (``args.clients``); prints the report, returns the RESULT."""
    default_threads = torch.get_num_threads()
    data = build_data(experiment(args, "ray", 1))
    sizes = data.train_sizes()
    print(
        f"\n===== fashion-mnist, {data.num_clients} clients ({partition_name(args)}): train "
        f"samples per client {sizes.min()}..{sizes.max()} (mean {sizes.mean():.0f}); "
        f"{args.rounds} rounds, W={args.workers}, default torch threads={default_threads}, "
        f"cores={os.cpu_count()}",
        flush=True,
    )
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)

    best: dict[str, dict[str, Any]] = {}
    for attempt in range(args.passes):
        for way in args.ways:
            print(f"pass {attempt}: ({way}) {WAY_NAMES[way]} ...", flush=True)
            out = run_way(way, args, data, default_threads)
            out["median"] = steady(out["round_seconds"])
            print(
                "    seconds per round "
                + " ".join(f"{s:.2f}" for s in out["round_seconds"])
                + f"; load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            if way not in best or out["median"] < best[way]["median"]:
                best[way] = out
    ways = [w for w in "abcd" if w in best]

    # ---- report
    print("\nwall seconds per round (round 0 = warm-up; best pass of each way)")
    print("round  " + "".join(f"{'(' + w + ') ' + WAY_NAMES[w]:>20}" for w in ways))
    for r in range(args.rounds):
        print(f"{r:6d} " + "".join(f"{best[w]['round_seconds'][r]:20.2f}" for w in ways))
    print("median " + "".join(f"{best[w]['median']:20.2f}" for w in ways))
    ratio = {
        f"{x}/{y}": best[x]["median"] / best[y]["median"]
        for x, y in ("ad", "ac", "bc", "cd")
        if x in best and y in best
    }
    print("ratios: " + "  ".join(f"{k}={v:.3f}" for k, v in ratio.items()))
    # CPU seconds per steady round: less sensitive to other users' load than wall time.
    first = 1 if args.rounds > 1 else 0
    cpu_round = {
        w: (best[w]["cpu_marks"][args.rounds] - best[w]["cpu_marks"][first]) / (args.rounds - first)
        for w in ways
    }
    print(
        "CPU seconds per round (all processes of each way): "
        + "  ".join(f"({w}) {cpu_round[w]:.2f}" for w in ways)
    )
    pairs = [("a", "d", "both 1 thread"), ("b", "c", "both default threads")]
    for x, y, why in pairs:
        if x in best and y in best:
            diff = float((best[x]["params"] - best[y]["params"]).abs().max())
            print(f"same work check: max |params ({x}) - params ({y})| = {diff:.2e} ({why})")

    outside, sum_share = (
        report_ray_breakdown(best["a"], args.rounds) if "a" in best else (float("nan"),) * 2
    )
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    result = (
        f"RESULT algorithm={args.algorithm} clients={args.clients} "
        f"ray_vs_ideal={ratio.get('a/d', float('nan')):.3f} "
        f"ray_vs_plain={ratio.get('a/c', float('nan')):.3f} outside_training={outside:.4f} "
        f"sum_share={sum_share:.4f}"
    )
    print(result, flush=True)
    return result


if __name__ == "__main__":
    main()
