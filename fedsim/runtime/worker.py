"""ClientWorker: runs many clients in sequence on one LightningModule.

The in-process executor and every Ray actor run exactly this code, so the executor never
changes results. The worker knows the algorithm only through its seam (``client_start`` /
``client_finish``) and reduces weighted sums locally: one partial aggregate per round.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    WeightedSum,
)
from fedsim.data.federated import FederatedData
from fedsim.deployment.upload import (
    UploadJob,
    UploadReport,
    run_client_steps,
    training_counts,
    training_data,
    upload_nbytes,
)
from fedsim.gradient_tasks import CurvatureTask, GradientTask, TaskOutput
from fedsim.round_context import RoundContext
from fedsim.runtime.client_eval import evaluate_client_models, evaluate_on_splits
from fedsim.runtime.flops import CostMeter
from fedsim.runtime.gradient_work import curvature, gradient, vmappable
from fedsim.runtime.model_fit import build_client_model, fit_model, sample_batch
from fedsim.runtime.probe import WorkerProbe
from fedsim.runtime.training import (
    EvalResult,
    TrainResult,
    all_finite,
    evaluate_client,
    frozen_parameters,
    keep_frozen,
    seed_torch,
    train_client,
)
from fedsim.runtime.worker_spec import WorkerSpec
from fedsim.streams import torch_seed
from lightning_modules.flat_params import bind_flat_parameters


@dataclass
class ClientTask:
    client: int
    payload: dict[str, Any]
    state: ClientState | None
    evaluate: bool
    train: bool
    upload: UploadJob | None = None  # what the deployment options do to it (None: nothing)
    newcomer: bool = False  # a held-out client: evaluated by the algorithm's newcomer rule
    context: RoundContext | None = None  # the round's (None: nothing scheduled, the spec's lr)


Task = ClientTask | GradientTask | CurvatureTask


@dataclass
class ClientResult:
    client: int
    evaluation: EvalResult | None = None
    train_loss: float | None = None
    failed: bool = False
    state: ClientState | None = None  # new private state (None: unchanged)
    individual: Any = None
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    upload_bytes: int = 0  # what the client sent (the algorithm's protocol, not our transport)
    weights: dict[str, float] = field(default_factory=dict)  # its weight in each weighted sum
    upload: UploadReport | None = None  # what the deployment client stages did
    sum_seconds: float = 0.0  # adding its update into the worker's weighted sums
    logged: dict[str, float] = field(default_factory=dict)  # the module's self.log, per name
    held_out: bool = False  # a held-out client's evaluation (eval.holdout_clients)
    global_evaluation: EvalResult | None = None  # eval.model=both: the global model's
    after_training: bool = False  # evaluated on the model it keeps (eval.when=after_training)
    validation: EvalResult | None = None  # eval.validation_ratio: the same model's on val
    flops: int | None = None  # eval.count_flops: its local training's (extra passes too)
    peak_memory: int | None = None  # eval.count_flops on a GPU: its training's peak, bytes


@dataclass
class WorkerResult:
    sums: dict[str, WeightedSum] = field(default_factory=dict)
    clients: list[ClientResult] = field(default_factory=list)
    outputs: list[TaskOutput] = field(default_factory=list)  # of GradientTasks
    train_seconds: float = 0.0
    compute_seconds: float = 0.0  # training + evaluation + gradients: the model's own work
    sum_seconds: float = 0.0  # adding the clients' updates into the float64 partial sums
    busy_seconds: float = 0.0
    first_done_at: float = 0.0  # time.time() when its first task was done (start-up timeline)


class ClientWorker:
    """One LightningModule bound to a flat parameter buffer, reused for every client."""

    def __init__(self, spec: WorkerSpec, data: FederatedData):
        if spec.num_threads:
            torch.set_num_threads(spec.num_threads)
        self.spec, self.data = spec, data
        self.device = torch.device(spec.device)
        module = build_client_model(spec.model).to(self.device)
        # lazy layers take their shapes from one sample batch, as on the driver
        fit_model(module, sample_batch(data, self.device), data.num_classes, spec.model.name)
        self.module = module
        self.flat, self.layout = bind_flat_parameters(module)  # on self.device
        self.vmappable = vmappable(module)  # stacked gradient tasks batch their entries
        self.algorithm = spec.algorithm
        self.class_counts = data.class_counts("train", newcomers=True)
        self.train_sizes = data.train_sizes(newcomers=True)
        self.meter = CostMeter(spec.client.count_flops, self.device)  # eval.count_flops

    def run(self, round_idx: int, broadcast: dict[str, Any], tasks: list[Task]) -> WorkerResult:
        """Run each task in order; client tasks reduce into one partial aggregate. A client
        task carries its round's ``RoundContext``; nothing of a round stays on the worker."""
        start = time.perf_counter()
        result = WorkerResult()
        for task in tasks:
            if isinstance(task, ClientTask):
                client_result = self._run_client(round_idx, broadcast, task, result.sums)
                result.clients.append(client_result)
                result.train_seconds += client_result.train_seconds
                result.compute_seconds += client_result.train_seconds + client_result.eval_seconds
                result.sum_seconds += client_result.sum_seconds
                if not result.first_done_at and client_result.train_loss is not None:
                    result.first_done_at = time.time()
                continue
            began = time.perf_counter()
            if isinstance(task, CurvatureTask):
                result.outputs.append(curvature(self, round_idx, broadcast, task))
            elif isinstance(task, GradientTask):
                result.outputs.append(self._gradient(round_idx, broadcast, task))
            else:
                raise TypeError(f"unknown task type {type(task).__name__}")
            result.compute_seconds += time.perf_counter() - began
        result.busy_seconds = time.perf_counter() - start
        return result

    def context(self, round_idx: int, task: ClientTask) -> RoundContext:
        """``task``'s round context (a task built without one: nothing scheduled)."""
        if task.context is not None:
            return task.context
        spec = self.spec
        return RoundContext(
            round_idx, self.algorithm.params, lr=spec.client.optimizer.lr,
            clip_grad_norm=spec.client.clip_grad_norm,
        )  # fmt: skip

    def _trained_params(self) -> torch.Tensor:
        """A CPU copy of the module's flat parameters."""
        return self.flat.detach().to("cpu", copy=True)

    def _gradient(
        self, round_idx: int, broadcast: dict[str, Any], task: GradientTask
    ) -> TaskOutput:
        """A gradient task (the probe's too), with the client's torch seed."""
        seed = torch_seed(self.spec.client.seed, round_idx, task.client)
        return gradient(self, round_idx, broadcast, task, seed)

    def _evaluate(self, params: torch.Tensor, samples: np.ndarray) -> EvalResult:
        """Accuracy and loss of ``params`` on ``samples`` (eval mode)."""
        self.flat.copy_(params)
        return evaluate_client(
            self.module,
            self.data,
            np.asarray(samples, dtype=np.int64),
            batch_size=self.spec.client.eval_batch_size,
            device=self.device,
        )

    def _run_client(
        self,
        round_idx: int,
        broadcast: dict[str, Any],
        task: ClientTask,
        sums: dict[str, WeightedSum],
    ) -> ClientResult:
        """Evaluate and/or train one client: the algorithm's ``client_start``, the main
        pass, the task's upload steps, ``client_finish``, and its sums into ``sums``."""
        split = self.data.split(task.client)
        info = self._client_info(round_idx, task)
        if task.newcomer:
            return self._serve_newcomer(broadcast, task, info)
        out = ClientResult(client=task.client)
        with self.meter.count(out, task.train):  # a trained client's passes (FedRep's head)
            plan = self.algorithm.client_start(broadcast, task.payload, task.state, info)
        eval_params = plan.train_params if plan.eval_params is None else plan.eval_params
        in_place = None  # the parameters evaluation left in the module
        if task.evaluate and not (task.train and self.spec.client.eval_after_training):
            in_place = evaluate_client_models(self, out, broadcast, eval_params, split)
        if not task.train:
            return out
        began = time.perf_counter()
        if in_place is not plan.train_params:
            self.flat.copy_(plan.train_params)  # else evaluation left exactly these in place
        with self.meter.count(out):
            trained = self._main_pass(round_idx, task, plan, info)
        plan.optimizer_state = trained.optimizer_state
        out.logged = trained.logged
        out.train_loss = trained.mean_loss
        out.train_seconds = time.perf_counter() - began
        if not trained.finite or not all_finite(self.flat):
            out.failed = True  # left out of the aggregate; its state stays as before
            if task.evaluate and self.spec.client.eval_after_training:  # it keeps what it received
                evaluate_client_models(self, out, broadcast, eval_params, split)
            return out
        uploaded = self._trained_params()
        if plan.frozen:  # float buffers (BatchNorm statistics) of the frozen part too
            keep_frozen(uploaded, plan.train_params, self.layout, plan.frozen)
        trained_model = uploaded.clone() if self.spec.client.eval_after_training else uploaded
        job = task.upload
        if job is not None and job.model is not None:
            uploaded, out.upload = run_client_steps(
                job, plan.train_params, uploaded, round_idx, task.client
            )
        with self.meter.count(out):  # the algorithm's own passes
            update = self.algorithm.client_finish(plan, uploaded, task.state, info)
        # what labelled extra passes recorded (Ditto's personal pass), beside the main pass's
        out.logged = {**out.logged, **getattr(info.probe, "logged", {})}
        out.train_seconds = time.perf_counter() - began  # with the algorithm's own passes
        if update.train_loss is not None:  # trained in the algorithm's own loop
            out.train_loss = update.train_loss
            if not math.isfinite(update.train_loss):
                out.failed = True  # as a non-finite main pass: left out, state unchanged
                return out
        self._add_update(out, update, job, sums)
        if task.evaluate and self.spec.client.eval_after_training:
            kept = self.algorithm.kept_params(plan, trained_model, update, info)
            evaluate_client_models(self, out, broadcast, kept, split)
            out.after_training = True
        return out

    def _serve_newcomer(
        self, broadcast: dict[str, Any], task: ClientTask, info: ClientInfo
    ) -> ClientResult:
        """A held-out client: the algorithm's newcomer rule on its own data, evaluated on its
        test split; nothing it did leaves the worker but the evaluation."""
        began = time.perf_counter()
        params = self.algorithm.newcomer_params(
            broadcast, task.payload, info, self.spec.client.finetune_epochs
        )
        out = ClientResult(client=task.client, held_out=True)
        evaluate_on_splits(self, out, params, self.data.split(task.client))
        out.eval_seconds = time.perf_counter() - began
        return out

    def _client_info(self, round_idx: int, task: ClientTask) -> ClientInfo:
        client = task.client
        context = self.context(round_idx, task)
        return self.algorithm.client_info(
            client,
            round_idx,
            num_train=int(self.train_sizes[client]),
            # held-out clients' too; as the deployment stages make them look (an attacker's)
            class_counts=training_counts(task.upload, self.class_counts[client]),
            probe=WorkerProbe(self, client, context),
            # evaluated after training: an evaluation-only personalization waits for it
            evaluates=task.evaluate and not (task.train and self.spec.client.eval_after_training),
            trains=task.train,
            epochs=self.spec.client.local.of(client),
            context=context,
        )

    def _main_pass(
        self, round_idx: int, task: ClientTask, plan: ClientPlan, info: ClientInfo
    ) -> TrainResult:
        """The client's local training from the module's current parameters, with the run
        plan's local work (epochs or steps, accumulation, warm-up), the round's lr and the
        client's own seed, on its data as the deployment stages
        make it look (``training_data``: an attacker's flipped labels)."""
        client, context, local = task.client, info.context, self.spec.client.local
        assert context is not None  # _client_info gives every client its round's
        seed = torch_seed(self.spec.client.seed, round_idx, client)
        seed_torch(seed, self.device)
        with frozen_parameters(self.module, plan.frozen):
            return train_client(
                self.module,
                training_data(task.upload, self.data),
                self.data.split(client).train if plan.train_indices is None else plan.train_indices,
                epochs=info.epochs if plan.epochs is None else plan.epochs,
                steps=local.steps if plan.epochs is None else None,  # an algorithm's own count
                accumulation=local.accumulation,
                warmup_steps=local.warmup_steps,
                batch_size=local.batch_size,
                generator=torch.Generator().manual_seed(seed),
                device=self.device,
                terms=plan.terms,
                clip_grad_norm=context.clip_grad_norm,
                lr_scale=context.lr_scale,
                optimizer_settings=context.optimizer,
                bf16=self.spec.client.bf16,
                optimizer_state=plan.optimizer_state,
                keep_optimizer_state=plan.keep_optimizer_state,
            )

    def _add_update(
        self,
        out: ClientResult,
        update: ClientUpdate,
        job: UploadJob | None,
        sums: dict[str, WeightedSum],
    ) -> None:
        """The client's sums into the worker's partial sums (or, when its job asks, kept on
        their own for the driver), its new state and the bytes it sent."""
        if job is not None and job.individual:
            out.upload = out.upload or UploadReport()
            out.upload.sums, sums = dict(update.sums), {}
        began = time.perf_counter()
        for key, (weight, value) in update.sums.items():
            sums.setdefault(key, WeightedSum()).add(weight, value)
            out.weights[key] = float(weight)
        out.sum_seconds = time.perf_counter() - began
        out.state, out.individual = update.state, update.individual
        out.upload_bytes = upload_nbytes(self.algorithm.upload_nbytes(update), out.upload)
