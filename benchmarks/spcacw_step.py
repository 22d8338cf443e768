"""SP-CACW: seconds per round in fedsim against plain PyTorch loops, same process, same run.

The setting is the independent check's (``configs/spcacw/mnist5k-relabel-mlp.yaml``):
mnist-5k relabelled, 20 clients, MLP 784-200-200-10, batch 10, all 20 clients as targets,
so one round is 19 steps of 20 x 20 = 400 minibatch gradients (7,600 a round). Timed, in
turns, ``--reps`` times each after one warm-up (round 0 from the initial models each time):

- ``fedsim``: ``SPCACW.train_round`` on the local executor (the worker computes each
  target's peers as one ``vmap`` over their minibatches), L by HVPs, the bias estimates, the
  Gram matrices, the FTAL solve; evaluation is not in it;
- ``plain``: the same round as a plain PyTorch loop (no fedsim task, executor or worker):
  per step and target ``torch.func.vmap(grad(...))`` over the peers' minibatches at the
  target's model (the very minibatches fedsim draws), the model step, the bias EMA, the two
  Gram matrices (``fedsim.gradient_tasks.gram``, as fedsim's); L by Hessian-vector
  products (double backprop, 10 power iterations on 128 samples); the same FTAL solver;
- ``gradients``: only the per-step gradients (the same vmap) and the model step: the floor
  under any implementation of SP-CACW's round, which also needs the M x M Gram matrices of
  the M x P gradient and bias stacks every step and target (as much arithmetic again).

Every process runs torch with one thread (``--threads``). Ray: ``--ray`` also times the round
on the 2-worker pool. Checks that fedsim and the plain loop end the round at the same models
and alpha (up to float rounding), then prints the medians and the last line
``RESULT spcacw_step round_vs_plain=<fedsim s / plain s> round_vs_gradients=<fedsim s /
gradients s> solver_share=<solver s / fedsim s>`` (median over the turns of each turn's
ratio; issue 26's target: round_vs_plain <= 1.2).

    .venv/bin/python benchmarks/spcacw_step.py [--reps 5] [--ray]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.func import functional_call, grad_and_value, vmap

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's fedsim, wherever it runs from

from fedsim.algorithms.base import ExchangeRound  # noqa: E402
from fedsim.algorithms.simplex import solve_leader  # noqa: E402
from fedsim.algorithms.spcacw import SPCACW  # noqa: E402
from fedsim.config import load_config  # noqa: E402
from fedsim.gradient_tasks import gram  # noqa: E402
from fedsim.runtime.executor import Executor, LocalExecutor  # noqa: E402
from fedsim.simulation import Simulation  # noqa: E402
from fedsim.streams import torch_seed  # noqa: E402
from lightning_modules.registry import build_model  # noqa: E402

CONFIG = ROOT / "configs" / "spcacw" / "mnist5k-relabel-mlp.yaml"


def simulation(extra: list[str]) -> Simulation:
    sim = Simulation(load_config(CONFIG, ["runtime.executor=local", *extra]))
    sim.worker_spec.num_threads = torch.get_num_threads()
    return sim


def fedsim_round(sim: Simulation, executor: Executor) -> tuple[dict[str, Any], float]:
    """fedsim's round 0 from the initial state: (state, solver seconds)."""
    algo: SPCACW = sim.algorithm  # type: ignore[assignment]
    cfg = sim.cfg

    def exchange(tasks: list[Any], broadcast: dict[str, Any]) -> list[Any]:
        return executor.exchange(0, broadcast, tasks)

    context = ExchangeRound(0, cfg.seed, cfg.client.lr, cfg.client.batch_size, exchange)
    state, _ = algo.train_round(algo.init_state(sim.initial_params), context)
    return state, algo.solver_seconds


class PlainRound:
    """SP-CACW's round 0 written as a plain PyTorch loop over targets and steps."""

    def __init__(self, sim: Simulation):
        self.sim, self.algo = sim, sim.algorithm
        self.model = build_model(sim.cfg.model.name, **sim.worker_spec.model.kwargs)
        self.names = [n for n, _ in self.model.named_parameters()]
        self.shapes = [p.shape for _, p in self.model.named_parameters()]
        self.sizes = [p.numel() for _, p in self.model.named_parameters()]
        self.grads = vmap(grad_and_value(self.loss), in_dims=(None, 0, 0))
        cfg = sim.cfg
        self.context = ExchangeRound(0, cfg.seed, cfg.client.lr, cfg.client.batch_size, None)

    def params(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = torch.split(flat, self.sizes)
        return {n: p.view(s) for n, p, s in zip(self.names, parts, self.shapes, strict=True)}

    def loss(self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> Any:
        logits = functional_call(self.model, params, (x,))
        return torch.nn.functional.cross_entropy(logits, y, reduction="sum") / y.shape[0]

    def step_gradients(self, flat: torch.Tensor, batches: list[np.ndarray]) -> torch.Tensor:
        """M x P: each batch's gradient at ``flat``, one vmap per batch size."""
        params = self.params(flat)
        sizes = sorted({len(b) for b in batches})
        out = None if len(sizes) == 1 else torch.empty(len(batches), flat.numel())
        for size in sizes:
            rows = [i for i, b in enumerate(batches) if len(b) == size]
            x, y = self.sim.data.batch(np.concatenate([batches[i] for i in rows]))
            x, y = x.reshape(len(rows), size, *x.shape[1:]), y.reshape(len(rows), size)
            parts, _ = self.grads(params, x, y)
            stack = torch.cat([parts[n].reshape(len(rows), -1) for n in self.names], 1)
            if out is None:
                return stack  # every batch of one size: the stack itself
            out[rows] = stack
        return out

    def lipschitz(self, flat: torch.Tensor, client: int) -> float:
        """Top Hessian eigenvalue by 10 Hessian-vector products (double backprop) on 128 of
        the client's samples."""
        algo, seed = self.algo, self.sim.cfg.seed
        own = np.asarray(algo.federation.client_train_indices[client], dtype=np.int64)
        rng = np.random.default_rng([seed, 0, client, 5, 0])
        samples = np.sort(rng.choice(own, size=min(128, len(own)), replace=False))
        x, y = self.sim.data.batch(samples)
        params = [t.detach().requires_grad_() for t in self.params(flat).values()]
        loss = self.loss(dict(zip(self.names, params, strict=True)), x, y)
        gradient = torch.autograd.grad(loss, params, create_graph=True)
        generator = torch.Generator().manual_seed(torch_seed(seed, 0, client, 5, 0))
        v = [torch.randn(s, generator=generator) for s in self.shapes]
        eigenvalue = 0.0
        for _ in range(algo.params.lipschitz_iterations):
            norm = torch.sqrt(sum((t * t).sum() for t in v))
            v = [t / norm for t in v]
            dot = sum((g * t).sum() for g, t in zip(gradient, v, strict=True))
            hv = torch.autograd.grad(dot, params, retain_graph=True)
            new = float(sum((t * h).sum() for t, h in zip(v, hv, strict=True)))
            done = abs(new - eigenvalue) <= 1e-3 * max(abs(new), 1e-12)
            eigenvalue, v = new, list(hv)
            if done:
                break
        return abs(eigenvalue)

    def run(self, bookkeeping: bool) -> dict[str, Any]:
        """Round 0 for every target; ``bookkeeping=False``: gradients and model steps only."""
        algo, context, eta = self.algo, self.context, self.sim.cfg.client.lr
        targets, m = algo.targets, algo.federation.num_clients
        models = self.sim.initial_params.unsqueeze(0).repeat(len(targets), 1)
        p = models.shape[1]
        alpha = np.zeros((len(targets), m))
        alpha[np.arange(len(targets)), targets] = 1.0
        bias = torch.zeros(len(targets), m, p)
        grams = np.zeros((2, len(targets), m, m))
        lipschitz = [self.lipschitz(models[k], c) for k, c in enumerate(targets)]
        own = [algo.target_batches(context, c) for c in targets]
        for step in range(max(len(b) for b in own)):
            for k, target in enumerate(targets):
                if step >= len(own[k]):
                    continue
                batches = [
                    own[k][step] if i == target else algo.peer_batch(context, step, target, i)
                    for i in range(m)
                ]
                g = self.step_gradients(models[k], batches)
                models[k] -= eta * (torch.as_tensor(alpha[k], dtype=torch.float32) @ g)
                if bookkeeping:
                    bias[k].lerp_(g - g[target], 1.0 / (step + 1))
                    grams[0, k] += gram(bias[k]).numpy()
                    grams[1, k] += eta * gram(g).numpy()
        if bookkeeping:
            for k in range(len(targets)):
                alpha[k] = solve_leader(grams[0, k] + lipschitz[k] * grams[1, k], 0.0, alpha[k])
        return {"models": models, "alpha": alpha, "lipschitz": np.asarray(lipschitz)}


def median_ratio(times: dict[str, list[float]], top: str, bottom: str) -> float:
    return statistics.median(a / b for a, b in zip(times[top], times[bottom], strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ray", action="store_true", help="also time the 2-worker Ray pool")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. data.num_clients=8")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    torch.set_num_threads(args.threads)
    sim = simulation(args.overrides)
    plain = PlainRound(sim)
    solver: list[float] = []
    with LocalExecutor(sim.worker_spec, sim.data) as executor:
        ways: dict[str, Callable[[], Any]] = {
            "fedsim": lambda: solver.append(fedsim_round(sim, executor)[1]),
            "plain": lambda: plain.run(bookkeeping=True),
            "gradients": lambda: plain.run(bookkeeping=False),
        }
        ours, _ = fedsim_round(sim, executor)  # warm-up, and the check below
        theirs = plain.run(bookkeeping=True)
        plain.run(bookkeeping=False)
        for key in ("models", "alpha", "lipschitz"):
            a, b = np.asarray(ours[key]), np.asarray(theirs[key])
            print(f"fedsim vs plain loop after the round: max |{key} difference| "
                  f"{np.abs(a - b).max():.2e} (largest |{key}| {np.abs(b).max():.2e})")  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in ways}
        for rep in range(args.reps):
            order = list(ways)[rep % 3 :] + list(ways)[: rep % 3]  # each goes first in turn
            for name in order:
                began = time.perf_counter()
                ways[name]()
                times[name].append(time.perf_counter() - began)
            print(f"turn {rep}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in ways))
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.2f} s per round ({len(values)} turns)")
    if args.ray:
        from fedsim.runtime.ray_executor import RayExecutor

        runtime = dataclasses.replace(sim.cfg.runtime, executor="ray", workers=2)
        spec = dataclasses.replace(sim.worker_spec, num_threads=1)
        with RayExecutor(runtime, spec, sim.data) as pool:
            fedsim_round(sim, pool)
            pooled = []
            for _ in range(args.reps):
                began = time.perf_counter()
                fedsim_round(sim, pool)
                pooled.append(time.perf_counter() - began)
        print(f"fedsim on the Ray pool (2 workers, 1 thread each): median "
              f"{statistics.median(pooled):.2f} s per round")  # fmt: skip
    share = statistics.median(solver) / statistics.median(times["fedsim"])
    print(
        f"RESULT spcacw_step round_vs_plain={median_ratio(times, 'fedsim', 'plain'):.2f} "
        f"round_vs_gradients={median_ratio(times, 'fedsim', 'gradients'):.2f} "
        f"solver_share={share:.4f}"
    )


if __name__ == "__main__":
    main()
