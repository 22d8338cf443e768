"""ClientWorker: runs many clients in sequence on one LightningModule.

The in-process executor and every Ray actor run exactly this code, so the executor never
changes results. The worker knows the algorithm only through its seam (``client_start`` /
``client_finish``) and reduces weighted sums locally: one partial aggregate per round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedsim.algorithms.base import Algorithm, ClientInfo, ClientState, WeightedSum
from fedsim.data.federated import FederatedData
from fedsim.runtime.training import EvalResult, evaluate_client, train_client
from lightning_modules.flat_params import bind_flat_parameters
from lightning_modules.registry import build_model


def client_seed(seed: int, round_idx: int, client: int) -> int:
    """A client's randomness depends only on (seed, round, client), never on the worker."""
    return int(np.random.SeedSequence([seed, round_idx, client]).generate_state(1)[0])


@dataclass
class WorkerSpec:
    """Everything a worker needs to build its module (picklable; the data travels apart)."""

    model_name: str
    model_kwargs: dict[str, Any]
    algorithm: Algorithm
    epochs: int
    batch_size: int
    eval_batch_size: int
    seed: int
    num_threads: int | None = None


@dataclass
class ClientTask:
    client: int
    payload: dict[str, Any]
    state: ClientState | None
    evaluate: bool
    train: bool


@dataclass
class ClientResult:
    client: int
    evaluation: EvalResult | None = None
    train_loss: float | None = None
    failed: bool = False
    state: ClientState | None = None  # new private state (None: unchanged)
    individual: Any = None
    train_seconds: float = 0.0


@dataclass
class WorkerResult:
    sums: dict[str, WeightedSum] = field(default_factory=dict)
    clients: list[ClientResult] = field(default_factory=list)
    train_seconds: float = 0.0
    busy_seconds: float = 0.0


class ClientWorker:
    """One LightningModule bound to a flat parameter buffer, reused for every client."""

    def __init__(self, spec: WorkerSpec, data: FederatedData):
        if spec.num_threads:
            torch.set_num_threads(spec.num_threads)
        self.spec, self.data = spec, data
        self.module = build_model(spec.model_name, **spec.model_kwargs)
        self.flat, self.layout = bind_flat_parameters(self.module)
        self.algorithm = spec.algorithm
        self.class_counts = data.class_counts("train")
        self.train_sizes = data.train_sizes()

    def run(
        self, round_idx: int, broadcast: dict[str, Any], tasks: list[ClientTask]
    ) -> WorkerResult:
        """Evaluate and/or train each task's client; return one partial aggregate."""
        start = time.perf_counter()
        result = WorkerResult()
        for task in tasks:
            client_result = self._run_client(round_idx, broadcast, task, result.sums)
            result.clients.append(client_result)
            result.train_seconds += client_result.train_seconds
        result.busy_seconds = time.perf_counter() - start
        return result

    def _run_client(
        self,
        round_idx: int,
        broadcast: dict[str, Any],
        task: ClientTask,
        sums: dict[str, WeightedSum],
    ) -> ClientResult:
        client = task.client
        split = self.data.clients[client]
        info = ClientInfo(
            client=client,
            num_train=int(self.train_sizes[client]),
            class_counts=self.class_counts[client],
            round=round_idx,
        )
        plan = self.algorithm.client_start(broadcast, task.payload, task.state, info)
        out = ClientResult(client=client)
        if task.evaluate:
            eval_params = plan.train_params if plan.eval_params is None else plan.eval_params
            self.flat.copy_(eval_params)
            out.evaluation = evaluate_client(
                self.module, self.data, split.test, batch_size=self.spec.eval_batch_size
            )
        if not task.train:
            return out
        began = time.perf_counter()
        self.flat.copy_(plan.train_params)
        seed = client_seed(self.spec.seed, round_idx, client)
        torch.manual_seed(seed)
        self.module.client_terms = plan.terms
        try:
            trained = train_client(
                self.module,
                self.data,
                split.train,
                epochs=self.spec.epochs,
                batch_size=self.spec.batch_size,
                generator=torch.Generator().manual_seed(seed),
            )
        finally:
            self.module.client_terms = None
        out.train_loss = trained.mean_loss
        out.train_seconds = time.perf_counter() - began
        if not trained.finite or not bool(torch.isfinite(self.flat).all()):
            out.failed = True  # left out of the aggregate; its state stays as before
            return out
        update = self.algorithm.client_finish(plan, self.flat.clone(), task.state, info)
        for key, (weight, value) in update.sums.items():
            sums.setdefault(key, WeightedSum()).add(weight, value)
        out.state, out.individual = update.state, update.individual
        return out
