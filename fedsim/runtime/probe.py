"""The ClientProbe a worker hands to algorithm code for one client (``algorithms.base``):
evaluate, take a gradient, draw the client's minibatches, or train any parameters on the
client's own data, inside the worker where the data and the module already are."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedsim.gradient_tasks import GradientTask
from fedsim.round_context import RoundContext
from fedsim.runtime.training import (
    EvalResult,
    all_finite,
    frozen_parameters,
    keep_frozen,
    seed_torch,
    train_client,
)
from fedsim.streams import PROBE_BATCHES_KIND, PROBE_TRAIN_KIND, torch_seed
from lightning_modules.hooks import ClientTerms


class WorkerProbe:
    """One client's probe (see ``ClientProbe``)."""

    def __init__(self, worker: Any, client: int, context: RoundContext):
        """``worker``: the ``ClientWorker`` (its module, flat buffer, data, spec);
        ``context``: the round's (its lr, optimizer settings and clipping)."""
        self.worker, self.client, self.context = worker, client, context
        self.round_idx = context.round
        self.logged: dict[str, float] = {}  # what labelled extra passes recorded (train/...)
        split = worker.data.split(client)
        self.train_indices, self.test_indices = split.train, split.test

    def evaluate(self, params: torch.Tensor, indices: np.ndarray | None = None) -> EvalResult:
        return self.worker._evaluate(params, self.test_indices if indices is None else indices)

    def gradient(
        self, params: torch.Tensor, indices: np.ndarray | None = None
    ) -> tuple[torch.Tensor, float]:
        task = GradientTask(client=self.client, params=params, indices=indices)
        out = self.worker._gradient(self.round_idx, {}, task)
        return out.gradient, out.loss

    def batches(
        self, epochs: int = 1, indices: np.ndarray | None = None, key: int = 0
    ) -> list[np.ndarray]:
        """Minibatches (index arrays of ``client.batch_size``) over ``epochs`` shuffled passes
        of ``indices`` (default the train split), seeded by (seed, round, client, ``key``): for
        an algorithm's own per-batch loop (pFedMe, Per-FedAvg, APFL)."""
        worker = self.worker
        samples = self.train_indices if indices is None else np.asarray(indices, np.int64)
        generator = torch.Generator().manual_seed(
            torch_seed(
                worker.spec.client.seed, self.round_idx, self.client, PROBE_BATCHES_KIND, key
            )
        )
        size, out = worker.spec.client.local.batch_size, []
        for _ in range(epochs):
            order = samples[torch.randperm(len(samples), generator=generator).numpy()]
            out += [order[start : start + size] for start in range(0, len(order), size)]
        return out

    @property
    def lr(self) -> float:
        """This round's lr from the run plan (the module's optimizer's first parameter group,
        times the round's factor): what the worker's main pass steps with."""
        return self.context.lr  # type: ignore[return-value]

    def train(
        self,
        params: torch.Tensor,
        *,
        epochs: int = 1,
        terms: ClientTerms | None = None,
        frozen: list[str] | None = None,
        indices: np.ndarray | None = None,
        key: int = 0,
        label: str | None = None,
    ) -> tuple[torch.Tensor, float]:
        """An extra local training pass from ``params`` (see ``ClientProbe.train``)."""
        worker = self.worker
        module = worker.module
        frozen_set = set(frozen or ())
        if epochs < 1 or all(n in frozen_set for n, _ in module.named_parameters()):
            return params.detach().to("cpu", copy=True), 0.0
        worker.flat.copy_(params)
        seed = torch_seed(
            worker.spec.client.seed, self.round_idx, self.client, PROBE_TRAIN_KIND, key
        )
        seed_torch(seed, worker.device)
        with frozen_parameters(module, frozen):
            result = train_client(
                module,
                worker.data,
                self.train_indices if indices is None else np.asarray(indices, dtype=np.int64),
                epochs=epochs,
                batch_size=worker.spec.client.local.batch_size,
                generator=torch.Generator().manual_seed(seed),
                device=worker.device,
                terms=terms,
                clip_grad_norm=self.context.clip_grad_norm,
                lr_scale=self.context.lr_scale,
                optimizer_settings=self.context.optimizer,
                bf16=worker.spec.client.bf16,
            )
        if label:  # the pass's own metrics, beside the main pass's: train/<label>/...
            self.logged[f"{label}/train_loss"] = result.mean_loss
            self.logged.update({f"{label}/{k}": v for k, v in result.logged.items()})
        trained = worker._trained_params()
        if frozen_set:  # float buffers (BatchNorm statistics) of the frozen part too
            keep_frozen(trained, params, worker.layout, frozen)
        if not result.finite or not all_finite(trained):
            return trained, float("nan")
        return trained, result.mean_loss
