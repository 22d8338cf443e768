"""WorkerSpec: everything a worker needs to build its module and run its clients, as slices
of the run plan (its model build and its client work), not copies of their fields: a new
per-client setting is one field of ``fedsim.client_work.ClientWork``.

Picklable (the data travels apart): the in-process executor builds its one worker from it,
the Ray pool each actor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedsim.algorithms.base import Algorithm
from fedsim.client_work import ClientWork
from fedsim.run_plan import ModelBuild, RunPlan


@dataclass
class WorkerSpec:
    """A worker's build: the plan's model build and client work, the algorithm, and the
    worker's own settings (threads, device)."""

    model: ModelBuild  # how the module is built (the driver's template the same way)
    client: ClientWork  # what every client's training and evaluation is made of
    algorithm: Algorithm
    num_threads: int | None = None
    device: str = "cpu"  # "cuda" inside a GPU worker; results always come back on the CPU

    @classmethod
    def from_plan(cls, plan: RunPlan, algorithm: Algorithm, **settings: Any) -> WorkerSpec:
        """The spec of ``plan`` for ``algorithm``; ``settings``: the worker's own."""
        assert plan.model is not None, "a worker needs the plan's model build"
        return cls(plan.model, plan.client, algorithm, **settings)
