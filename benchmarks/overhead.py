"""Overhead of fedsim against plain PyTorch doing exactly the same client work.

FedAvgCNN on Fashion-MNIST, 100 clients (Dirichlet 0.5), every client sampled every round:
each client evaluates the model it receives on its test split, then trains one epoch
(batch 10, SGD), and the server averages. Four ways, same data, same seeds:

  (a) fedsim, Ray executor, W worker actors (one thread each)
  (b) fedsim, local executor, in process, torch's default threads
  (c) plain PyTorch loop (no Lightning, no Ray), one process, torch's default threads
  (d) the ideal: the plain loop split over W OS processes (one thread each), same split as (a)

Prints wall seconds per round, the ratios, and where (a) spends the time that is not client
compute. Round 0 is a warm-up; the figures are over the rounds after it. Last line:
``RESULT ray_vs_ideal=<a/d> ray_vs_plain=<a/c> outside_training=<fraction of (a)>``.

    .venv/bin/python benchmarks/overhead.py [--rounds 4] [--workers W] [--clients 100]
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
from fedsim.runtime.worker import ClientTask, Task, WorkerResult, client_seed
from fedsim.simulation import Simulation, build_data


def experiment(args: argparse.Namespace, executor: str, cpus_per_worker: int) -> ExperimentConfig:
    return load_config(
        None,
        [
            "name=overhead",
            "data.name=fashion-mnist",
            "data.download=false",
            f"data.num_clients={args.clients}",
            "data.partition.name=dirichlet",
            "data.partition.alpha=0.5",
            f"rounds={args.rounds}",
            "join_ratio=1.0",
            "eval_every=1",
            "client.epochs=1",
            "client.batch_size=10",
            "client.lr=0.005",
            "algorithm.name=fedavg",
            f"runtime.executor={executor}",
            f"runtime.workers={args.workers}",
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
                logits = model(x)
                correct += int((logits.argmax(1) == y).sum())
                float(nn.functional.cross_entropy(logits, y, reduction="sum"))
        model.train()
        seed = client_seed(cfg.seed, round_idx, client)
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.client.lr)
        n, bs = len(split.train), cfg.client.batch_size
        order = split.train[torch.randperm(n, generator=generator).numpy()]
        for start in range(0, n, bs):
            x, y = data.batch(order[start : start + bs])
            loss = nn.functional.cross_entropy(model(x), y)
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
    from fedsim.runtime.ray_executor import task_cost

    tasks = [ClientTask(c, {}, None, evaluate=True, train=True) for c in range(data.num_clients)]
    costs = [task_cost(t, data.train_sizes(), data.test_sizes(), cfg.client.epochs) for t in tasks]
    return assign_balanced(costs, workers)


def steady(values: list[float]) -> float:
    """Mean over the rounds after the first (warm-up) one."""
    return statistics.fmean(values[1:] if len(values) > 1 else values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--clients", type=int, default=100)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    default_threads = torch.get_num_threads()
    workers = args.workers

    cfg_ray = experiment(args, "ray", 1)
    cfg_local = experiment(args, "local", default_threads)
    data = build_data(cfg_ray)
    sizes = data.train_sizes()
    print(
        f"fashion-mnist, {data.num_clients} clients (Dirichlet 0.5): train samples per client "
        f"{sizes.min()}..{sizes.max()} (mean {sizes.mean():.0f}); {args.rounds} rounds, "
        f"W={workers}, default torch threads={default_threads}, cores={os.cpu_count()}",
        flush=True,
    )
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)

    timings: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}  # CPU-second marks at round starts
    print("(a) fedsim + Ray ...", flush=True)
    a = run_fedsim(cfg_ray, data)
    timings["a"], cpu["a"] = a["round_seconds"], a["cpu_marks"]
    print(f"    pool start {a['startup']:.1f} s (not counted)", flush=True)

    print("(d) plain loop over W processes ...", flush=True)
    shares = client_shares(data, cfg_ray, workers)
    template = Simulation(cfg_ray, data).initial_params
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, initializer=_process_init, initargs=(cfg_ray,)) as pool:
        pool.map(_process_share, [([], template.numpy(), 0)] * workers)  # wait for startup

        def run_processes(shares: list[list[int]], params: torch.Tensor, r: int) -> list:
            return pool.map(_process_share, [(s, params.numpy(), r) for s in shares], chunksize=1)

        timings["d"], params_d, cpu["d"] = plain_round_loop(
            run_processes, shares, template, args.rounds
        )

    print("(c) plain loop, one process ...", flush=True)
    torch.set_num_threads(default_threads)
    model = PlainCNN()

    def run_inline(shares: list[list[int]], params: torch.Tensor, r: int) -> list:
        return [plain_share(model, data, share, params, r, cfg_ray) for share in shares]

    all_clients = [list(range(data.num_clients))]
    timings["c"], params_c, cpu["c"] = plain_round_loop(
        run_inline, all_clients, template, args.rounds
    )

    print("(b) fedsim, local executor ...", flush=True)
    b = run_fedsim(cfg_local, data)
    timings["b"], cpu["b"] = b["round_seconds"], b["cpu_marks"]
    torch.set_num_threads(default_threads)

    # ---- report
    print("\nwall seconds per round (round 0 = warm-up)")
    print("round   (a) ray   (b) local  (c) plain  (d) ideal")
    for r in range(args.rounds):
        row = "  ".join(f"{timings[k][r]:9.2f}" for k in "abcd")
        print(f"{r:5d}  {row}")
    mean = {k: steady(v) for k, v in timings.items()}
    print("mean   " + "  ".join(f"{mean[k]:9.2f}" for k in "abcd"))
    print(
        f"ratios: a/d={mean['a'] / mean['d']:.3f}  a/c={mean['a'] / mean['c']:.3f}  "
        f"b/c={mean['b'] / mean['c']:.3f}  c/d={mean['c'] / mean['d']:.3f}"
    )
    # CPU seconds per steady round: robust to other users' load (wall time is not).
    first = 1 if args.rounds > 1 else 0
    cpu_round = {k: (m[args.rounds] - m[first]) / (args.rounds - first) for k, m in cpu.items()}
    print(
        "CPU seconds per round (all processes of each way): "
        + "  ".join(f"({k}) {cpu_round[k]:.2f}" for k in "abcd")
        + f"; a/d={cpu_round['a'] / cpu_round['d']:.3f}"
    )
    print(
        "same work check, max |params| difference after all rounds: "
        f"(a) vs (d) {float((a['params'] - params_d).abs().max()):.2e} (both 1 thread), "
        f"(b) vs (c) {float((b['params'] - params_c).abs().max()):.2e} (both default threads)"
    )

    # ---- where (a) spends time that is not client compute (steady rounds)
    steady_rounds = range(1, args.rounds) if args.rounds > 1 else range(args.rounds)
    wall = sum(a["round_seconds"][r] for r in steady_rounds)
    call = sum(a["calls"][r][0] for r in steady_rounds)
    compute = [sum(w.compute_seconds for w in a["calls"][r][1]) for r in steady_rounds]
    busy_max = sum(max(w.busy_seconds for w in a["calls"][r][1]) for r in steady_rounds)
    compute_max = sum(max(w.compute_seconds for w in a["calls"][r][1]) for r in steady_rounds)
    busy_sum = sum(sum(w.busy_seconds for w in a["calls"][r][1]) for r in steady_rounds)
    outside = 1.0 - sum(compute) / (a["workers"] * wall)
    print(f"\n(a) over {len(steady_rounds)} steady rounds: wall {wall:.2f} s")
    print(f"    driver (sampling, payloads, aggregation, metrics): {wall - call:.3f} s")
    print(f"    Ray call beyond the slowest worker (transfer, scheduling): {call - busy_max:.3f} s")
    print(
        f"    in-worker bookkeeping (client_start/finish, copies): "
        f"{(busy_sum - sum(compute)) / a['workers']:.3f} s per worker"
    )
    imbalance = compute_max - sum(compute) / a["workers"]
    print(f"    waiting on the slowest worker (imbalance): {imbalance:.3f} s")
    print(f"    outside client compute: {outside:.3%} of W x wall")
    print(f"final accuracy (a) {a['acc']:.4f} (b) {b['acc']:.4f}")
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(
        f"RESULT ray_vs_ideal={mean['a'] / mean['d']:.3f} ray_vs_plain={mean['a'] / mean['c']:.3f} "
        f"outside_training={outside:.4f}"
    )


if __name__ == "__main__":
    main()
