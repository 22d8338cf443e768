"""Scaling in registered clients: 100, 300, 1,000 clients, 10% sampled per round.

Algorithm ``local`` keeps a full personal model per client in the driver's client state
store (FedAvgCNN: 582k floats, 2.3 MB a client), with a small memory budget so that the
largest run spills to disk. Fashion-MNIST split IID, so a round's total training samples are
the same at every size and the per-client cost grows with the cohort (10, 30, 100 clients).
Evaluation of every client happens only in round 0 and the final round; seconds per round are
the median over the training rounds in between. Peak memory is sampled every 0.2 s: resident
set of the driver plus the worker actors (and, for information, of every Ray process).

One line per size: ``RESULT clients=<n> s_per_round=<x> peak_rss_gb=<y>``.

    .venv/bin/python benchmarks/scale.py [--sizes 100 300 1000] [--rounds 5] [--state-memory-gb 0.5]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import threading
import time

import psutil
import ray

from fedsim.config import load_config
from fedsim.runtime.ray_cluster import use_private_ray_defaults
from fedsim.runtime.ray_executor import RayExecutor
from fedsim.simulation import Simulation

GB = 2**30


class MemorySampler(threading.Thread):
    """Peak summed RSS of the driver plus given worker pids, and of the whole process tree.

    RSS counts shared pages (torch's libraries, the dataset's object-store pages) once per
    process; PSS splits them among the processes that share them (sampled every 5th time,
    it is slower to read)."""

    def __init__(self, pids: list[int], period: float = 0.2):
        super().__init__(daemon=True)
        self.pids, self.period = pids, period
        self.peak_workers = self.peak_tree = self.peak_shm = self.peak_pss = 0
        self._halt = threading.Event()

    @staticmethod
    def _rss(pid: int) -> int:
        try:
            return psutil.Process(pid).memory_info().rss
        except psutil.Error:
            return 0

    @staticmethod
    def _pss(pid: int) -> int:
        try:
            return psutil.Process(pid).memory_full_info().pss
        except psutil.Error:
            return 0

    def run(self) -> None:
        me = psutil.Process()
        tick = 0
        while not self._halt.is_set():
            if tick % 5 == 0:
                pss = sum(map(self._pss, [me.pid, *self.pids]))
                self.peak_pss = max(self.peak_pss, pss)
            tick += 1
            driver = me.memory_info().rss
            self.peak_workers = max(self.peak_workers, driver + sum(map(self._rss, self.pids)))
            tree = driver + sum(self._rss(p.pid) for p in me.children(recursive=True))
            self.peak_tree = max(self.peak_tree, tree)
            shm = shutil.disk_usage("/dev/shm").used if os.path.isdir("/dev/shm") else 0
            self.peak_shm = max(self.peak_shm, shm)
            self._halt.wait(self.period)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def run_size(clients: int, args: argparse.Namespace) -> tuple[float, float]:
    """One size. Built by hand (not ``run_experiment``) on purpose: the memory sampler needs
    the pool's worker pids while it runs, and the store's counts after."""
    cfg = load_config(
        None,
        [
            "name=scale",
            "data.name=fashion-mnist",
            "data.download=false",
            f"data.num_clients={clients}",
            "data.partition.name=iid",
            f"rounds={args.rounds}",
            "join_ratio=0.1",
            f"eval_every={args.rounds}",
            "client.epochs=1",
            "client.batch_size=10",
            "client.lr=0.005",
            "algorithm.name=local",
            "runtime.executor=ray",
            f"runtime.state_memory_gb={args.state_memory_gb}",
        ],
    )
    sim = Simulation(cfg)
    executor = RayExecutor(cfg.runtime, sim.worker_spec, sim.data)
    sampler = MemorySampler([info["pid"] for info in executor.worker_info])
    sampler.start()
    began = time.perf_counter()
    try:
        result = sim.run(executor)
    finally:
        executor.close()
        sampler.stop()
    total = time.perf_counter() - began
    seconds = [h["seconds"] for h in result.history]
    training = seconds[1 : args.rounds]  # rounds without evaluation
    s_per_round = statistics.median(training)
    store = result.client_store
    print(
        f"clients={clients}: cohort {max(1, int(0.1 * clients))}, "
        f"{executor.num_workers} workers; seconds per round "
        + " ".join(f"{s:.2f}" for s in seconds)
        + f" (round 0 and {args.rounds} evaluate all {clients} clients); total {total:.1f} s"
    )
    print(
        f"    client states: {len(store)} ({store.memory_bytes / GB:.2f} GB in memory, "
        f"{store.num_spilled} spilled to disk); peak RSS driver+workers "
        f"{sampler.peak_workers / GB:.2f} GB (PSS {sampler.peak_pss / GB:.2f} GB), "
        f"all Ray processes {sampler.peak_tree / GB:.2f} GB, "
        f"/dev/shm {sampler.peak_shm / GB:.2f} GB; final acc "
        f"{result.summary['final']['acc_weighted']:.4f}",
        flush=True,
    )
    store.close()
    return s_per_round, sampler.peak_workers / GB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--state-memory-gb", type=float, default=0.5)
    args = parser.parse_args()
    use_private_ray_defaults()  # as RayExecutor does for its own Ray
    load = os.getloadavg()
    print(f"cores={os.cpu_count()} load average before: {load[0]:.2f} {load[1]:.2f}", flush=True)
    ray.init(
        address="local",
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        logging_level=logging.WARNING,
    )
    results = []
    try:
        for clients in args.sizes:
            results.append((clients, *run_size(clients, args)))
    finally:
        ray.shutdown()
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f}")
    for clients, s_per_round, peak in results:
        print(f"RESULT clients={clients} s_per_round={s_per_round:.3f} peak_rss_gb={peak:.3f}")


if __name__ == "__main__":
    main()
