"""``runtime.executor=auto``: the local executor unless Ray can win back its own start-up.

A local Ray and its worker actors take tens of seconds to come up on a small machine (38-40 s
on 2 cores for 2 workers), and a small run finishes in less. The choice is made once per run,
from the run, and never changes its numbers (the executors agree to the bit):

- Ray when a cluster is there to join (``runtime.address``, ``RAY_ADDRESS``, or a Ray
  already started in this process), or when the run asks for Ray's workers
  (``runtime.workers``, ``runtime.gpus_per_worker``);
- else the local executor when Ray could run at most one worker at a time (one CPU, or
  one client a round), or when the time Ray could save is below its start-up: the local
  run's training time, estimated from its work (samples trained and evaluated a round x
  the model's parameters x the rounds), times ``1 - 1/workers``;
- else Ray.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import Any

from fedsim.config import RuntimeConfig

RAY_START_S = 30.0  # a local Ray and its actors ready, a 2-core machine (measured 27-40 s)
# one sample through forward and backward, per model parameter, on one CPU thread: measured
# on the quickstart (fedavg_cnn, 582,026 parameters: 3,750 samples a round in 2.2-2.8 s)
SECONDS_PER_PARAM_SAMPLE = 1.0e-9
EVAL_SHARE = 1 / 3  # an evaluated sample costs a forward, about a third of a trained one
# a language model over a frozen base: one token through forward and backward, per parameter
# of the whole model (the base included): benchmarks/lora_round.py's FedAvg round of 4 roles
# on SmolLM2 (134.5 M parameters, ~72 windows of 64 tokens trained and evaluated) took 29.3 s
SECONDS_PER_PARAM_TOKEN = 4.6e-11


@dataclass(frozen=True)
class RunWork:
    """What a run computes: its rounds, samples trained a round (cohort x epochs), samples
    evaluated at an evaluation and how many evaluations, the model's parameters, the
    clients trained a round."""

    rounds: int
    train_samples: float
    eval_samples: float
    evaluations: int
    params: int
    cohort: int
    tokens: int = 0  # a language model's tokens a sample (0: not one); params: the whole model

    @classmethod
    def of(cls, simulation: Any) -> RunWork:
        """What a built ``fedsim.simulation.Simulation`` computes: samples trained a round
        (the cohort's share of the training samples, times their epochs), samples evaluated
        at an evaluation, the evaluations, the parameters."""
        plan, data, cfg = simulation.plan, simulation.data, simulation.cfg
        template = getattr(simulation, "template", None)
        from lightning_modules.flat_params import has_frozen_base  # torch: a run's, not a check's

        frozen = template is not None and has_frozen_base(template)  # a base under adapters
        params = int(simulation.initial_params.numel())
        if frozen:  # the work is the whole model's, on every token
            params = sum(p.numel() for p in template.parameters())
        sizes = data.train_sizes().astype(float)
        epochs = float(plan.client.local.all_samples(sizes).sum())  # samples a round, all
        return cls(
            rounds=cfg.rounds,
            train_samples=float(epochs) * plan.cohort_size / max(plan.num_clients, 1),
            eval_samples=float(data.test_sizes().sum()),
            evaluations=len(range(0, cfg.rounds, cfg.eval_every)) + 1,
            params=params,
            cohort=plan.cohort_size,
            tokens=int(getattr(data.dataset, "seq_len", 0)) if frozen else 0,
        )

    def local_seconds(self) -> float:
        """Estimated training and evaluation time of the whole run on one worker."""
        evaluated = self.evaluations * self.eval_samples * EVAL_SHARE
        samples = self.rounds * self.train_samples + evaluated
        if self.tokens:
            return samples * self.tokens * self.params * SECONDS_PER_PARAM_TOKEN
        return samples * self.params * SECONDS_PER_PARAM_SAMPLE

    def described(self) -> str:
        """How the estimate was made, for the choice's line."""
        if self.tokens:
            return (f"estimated from {self.params / 1e6:.1f} M parameters x {self.tokens} "
                    "tokens a sample, on one CPU thread; a rough guess")  # fmt: skip
        return "estimated from the parameters x samples, on one CPU thread"


@dataclass(frozen=True)
class ExecutorChoice:
    """The executor a run uses and why."""

    executor: str  # local | ray
    reason: str
    auto: bool  # chosen by runtime.executor=auto (else given)

    def runtime(self, runtime: RuntimeConfig) -> RuntimeConfig:
        """``runtime`` with ``auto`` replaced by this choice."""
        return dataclasses.replace(runtime, executor=self.executor)

    def line(self) -> str:
        """One line: the choice, why, and how to force the other."""
        other = "ray" if self.executor == "local" else "local"
        return (
            f"fedsim: executor {self.executor} ({self.reason}); runtime.executor={other} "
            "forces the other"
        )


def cpus_here() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cluster_given(runtime: RuntimeConfig) -> str | None:
    """Why a Ray cluster is there to join, or None."""
    if runtime.address is not None:
        return f"runtime.address={runtime.address}"
    if os.environ.get("RAY_ADDRESS"):
        return "RAY_ADDRESS is set"
    ray = sys.modules.get("ray")  # started in this process (a notebook, the tests): no import
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        return "Ray is running in this process"
    return None


def choose_executor(runtime: RuntimeConfig, work: RunWork | None) -> ExecutorChoice:
    """The executor of a run with ``runtime`` doing ``work`` (None: unknown, e.g. a data
    set not downloaded yet; then Ray, the executor that does not lose on a large run)."""
    if runtime.executor != "auto":
        return ExecutorChoice(runtime.executor, "runtime.executor", auto=False)
    joined = cluster_given(runtime)
    if joined:
        return ExecutorChoice("ray", f"auto: {joined}", auto=True)
    if runtime.workers is not None:
        return ExecutorChoice("ray", f"auto: runtime.workers={runtime.workers} asked", auto=True)
    if (runtime.gpus_per_worker or 0) > 0:
        return ExecutorChoice("ray", "auto: runtime.gpus_per_worker asked", auto=True)
    if work is None:
        return ExecutorChoice("ray", "auto: the run's size is not known before its data", True)
    workers = min(int(cpus_here() // runtime.cpus_per_worker), work.cohort)
    if workers < 2:
        why = f"{cpus_here()} CPU" if work.cohort >= 2 else "one client a round"
        return ExecutorChoice("local", f"auto: Ray would run one worker at a time ({why})", True)
    local = work.local_seconds()
    saved = local * (1 - 1 / workers)
    shown = (f"~{local:.0f} s of work ({work.described()}), {workers} workers could save "
             f"~{saved:.0f} s")  # fmt: skip
    if saved < RAY_START_S:
        return ExecutorChoice("local", f"auto: {shown}, less than Ray's ~{RAY_START_S:.0f} s "
                              "start-up", True)  # fmt: skip
    return ExecutorChoice("ray", f"auto: {shown}, more than Ray's ~{RAY_START_S:.0f} s start-up",
                          True)  # fmt: skip
