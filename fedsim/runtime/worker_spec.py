"""WorkerSpec: everything a worker needs to build its module, derived from the run plan.

Picklable (the data travels apart): the in-process executor builds its one worker from it,
the Ray pool each actor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fedsim.algorithms.base import Algorithm
from fedsim.run_plan import LocalEpochs, OptimizerSettings, RunPlan


@dataclass
class WorkerSpec:
    """Everything a worker needs to build its module (picklable; the data travels apart)."""

    model_name: str
    model_kwargs: dict[str, Any]  # what fedsim passes: the data's shapes, client.* for FLModule
    algorithm: Algorithm
    batch_size: int
    eval_batch_size: int
    seed: int
    epochs: LocalEpochs = field(default_factory=LocalEpochs)  # each client's, from the plan
    optimizer: OptimizerSettings = field(default_factory=OptimizerSettings)
    num_threads: int | None = None
    device: str = "cpu"  # "cuda" inside a GPU worker; results always come back on the CPU
    clip_grad_norm: float | None = None  # client.clip_grad_norm: every local step's gradient
    bf16: bool = False  # client.precision=bf16-mixed
    model_args: dict[str, Any] = field(default_factory=dict)  # model.args (the constructor's)
    eval_model: str = "personal"  # eval.model: personal | global | both
    eval_after_training: bool = False  # eval.when=after_training: a trained client's kept model
    finetune_epochs: int = 1  # eval.finetune_epochs: a held-out client's adaptation

    @classmethod
    def from_plan(cls, plan: RunPlan, algorithm: Algorithm, **settings: Any) -> WorkerSpec:
        """The spec of ``plan`` (its model build and client work settings) for
        ``algorithm``; ``settings``: the worker's own (threads, device) or other fields."""
        assert plan.model is not None, "a worker needs the plan's model build"
        return cls(
            model_name=plan.model.name, model_kwargs=plan.model.kwargs,
            model_args=plan.model.args, optimizer=plan.optimizer, algorithm=algorithm,
            batch_size=plan.batch_size, eval_batch_size=plan.eval_batch_size,
            seed=plan.seed, epochs=plan.epochs, clip_grad_norm=plan.clip_grad_norm,
            bf16=plan.bf16, eval_model=plan.eval_model,
            eval_after_training=plan.eval_after_training,
            finetune_epochs=plan.finetune_epochs, count_flops=plan.count_flops, **settings,
        )  # fmt: skip
    count_flops: bool = False  # eval.count_flops: each client's training FLOPs
