"""SP-CACW's gradient exchange: seconds per step through fedsim's Ray pool vs plain PyTorch.

One SP-CACW step with ``targets=all`` and M clients is M x M gradients: every peer's
minibatch gradient at every target's model. fedsim sends one stacked ``GradientTask`` per
peer (the M target models shipped once per worker per step, as numpy) and each worker
returns all of its peers' gradients in one reply. References measured in the same run,
computing the same M x M gradients on the same minibatches:

- ``loop``: a plain PyTorch loop in this process (one model, load each target's parameters,
  backprop each peer's batch);
- ``two_processes``: the same loop split over two plain ``multiprocessing`` processes (half
  the peers each), the target models sent to both and the gradients sent back through pipes
  every step, as numpy.

Setting: FedAvgCNN on mnist-5k, ``--clients`` 20 (Dirichlet 0.5), batch 10, the Ray pool with
2 workers of 1 CPU each (torch 1 thread), ``--steps`` timed steps after one warm-up step.
Also timed: the solver's own time per alpha update (FTAL on the M x M objective of a real
step's Gram matrices) against a step. Last line:
``RESULT spcacw_step ray_vs_loop=<loop s / ray s> ray_vs_two_processes=<2-proc s / ray s>
solver_share=<solver s / ray step s>`` (a ratio > 1: the Ray pool is faster).

    .venv/bin/python benchmarks/spcacw_step.py [--clients 20] [--steps 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np
import torch

from fedsim.algorithms.base import ExchangeRound
from fedsim.algorithms.simplex import solve_leader
from fedsim.algorithms.spcacw import SPCACW
from fedsim.config import load_config
from fedsim.runtime.training import gradient_client
from fedsim.simulation import Simulation
from lightning_modules.flat_params import bind_flat_parameters
from lightning_modules.registry import build_model


def simulation(clients: int) -> Simulation:
    cfg = load_config(
        None,
        [
            "seed=0",
            "data.name=mnist-5k",
            f"data.num_clients={clients}",
            "data.partition.alpha=0.5",
            "client.batch_size=10",
            "algorithm.name=spcacw",
            "algorithm.targets=all",
            "runtime.executor=ray",
            "runtime.workers=2",
            "runtime.cpus_per_worker=1",
        ],
    )
    sim = Simulation(cfg)
    sim.worker_spec.num_threads = 1
    return sim


def step_work(sim: Simulation, step: int) -> tuple[list[Any], torch.Tensor]:
    """The tasks of one step (round 0) and the target models they are computed at."""
    algo: SPCACW = sim.algorithm  # type: ignore[assignment]
    context = ExchangeRound(0, sim.cfg.seed, sim.cfg.client.lr, sim.cfg.client.batch_size, None)
    batches = [algo.target_batches(context, c) for c in algo.targets]
    active = [k for k in range(len(algo.targets)) if step < len(batches[k])]
    tasks, _ = algo.step_tasks(context, step, active, batches)
    state = algo.init_state(sim.initial_params)
    models = state["models"] + 0.01 * step  # a different point each step
    return tasks, models


class PlainWorker:
    """A bare model and the data: the reference loop."""

    def __init__(self, sim: Simulation):
        torch.set_num_threads(1)
        self.data = sim.data
        self.module = build_model(sim.cfg.model.name, **sim.worker_spec.model_kwargs)
        self.flat, self.layout = bind_flat_parameters(self.module)

    def gradients(self, models: torch.Tensor, tasks: list[Any]) -> list[np.ndarray]:
        out = []
        grad = torch.zeros_like(self.flat)
        for task in tasks:
            stack = np.zeros((len(task.at), self.flat.numel()), dtype=np.float32)
            for j, (row, samples) in enumerate(task.at):
                self.flat.copy_(models[row])
                gradient_client(self.module, self.data, samples, grad, self.layout, batch_size=64)
                stack[j] = grad.numpy()
            out.append(stack)
        return out


def _serve(sim: Simulation, pipe: Any) -> None:
    worker = PlainWorker(sim)
    while True:
        message = pipe.recv()
        if message is None:
            return
        models, tasks = message
        pipe.send(worker.gradients(torch.from_numpy(models), tasks))


def time_steps(run_step: Any, steps: int) -> float:
    run_step(0)  # warm-up
    began = time.perf_counter()
    for step in range(1, steps + 1):
        run_step(step)
    return (time.perf_counter() - began) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    torch.set_num_threads(1)
    sim = simulation(args.clients)
    work = {s: step_work(sim, s) for s in range(args.steps + 1)}

    plain = PlainWorker(sim)
    loop = time_steps(lambda s: plain.gradients(work[s][1], work[s][0]), args.steps)
    print(f"plain loop, one process: {loop:.3f} s/step")

    context = mp.get_context("spawn")
    pipes, procs = [], []
    for _ in range(2):
        here, there = context.Pipe()
        proc = context.Process(target=_serve, args=(sim, there), daemon=True)
        proc.start()
        pipes.append(here)
        procs.append(proc)

    def two(step: int) -> None:
        tasks, models = work[step]
        halves = [tasks[0::2], tasks[1::2]]
        for pipe, half in zip(pipes, halves, strict=True):
            pipe.send((models.numpy(), half))
        for pipe in pipes:
            pipe.recv()

    two_processes = time_steps(two, args.steps)
    for pipe, proc in zip(pipes, procs, strict=True):
        pipe.send(None)
        proc.join()
    print(f"plain loop, two processes: {two_processes:.3f} s/step")

    from fedsim.runtime.ray_executor import RayExecutor

    runtime = dataclasses.replace(sim.cfg.runtime, executor="ray")
    with RayExecutor(runtime, sim.worker_spec, sim.data) as pool:
        last: list[Any] = []

        def ray_step(step: int) -> None:
            tasks, models = work[step]
            last[:] = pool.exchange(0, {"models": models}, tasks)

        ray = time_steps(ray_step, args.steps)
    print(f"fedsim Ray pool, 2 workers: {ray:.3f} s/step")

    # the solver on a real step's Gram matrices (M x M), per target
    m = args.clients
    grads = torch.zeros(m, m, sim.initial_params.numel())
    for output in last:
        for j, k in enumerate(output.tag):
            grads[k, output.client] = output.gradient[j]
    problems = []
    for k in range(m):
        g = grads[k].double()
        b = g - g[k]
        start = np.zeros(m)
        start[k] = 1.0
        problems.append(((b @ b.T + 0.1 * g @ g.T).numpy(), start))
    began = time.perf_counter()
    for q, start in problems:
        solve_leader(q, 0.0, start)
    solver = (time.perf_counter() - began) / m
    print(f"solver (FTAL, M={m}): {solver * 1e3:.2f} ms per update, {solver / ray:.2%} of a step")
    print(
        f"RESULT spcacw_step ray_vs_loop={loop / ray:.2f} "
        f"ray_vs_two_processes={two_processes / ray:.2f} solver_share={solver / ray:.4f}"
    )


if __name__ == "__main__":
    main()
