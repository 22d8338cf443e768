"""The round loop: sample -> payloads -> local work -> aggregate -> evaluate -> log.

Evaluation follows PFLlib: in an evaluation round every client evaluates the model it
received (personalized where the algorithm personalizes) on its own test split, before it
trains. Round ``rounds`` is a final evaluation-only round after the last aggregation.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.algorithms.base import Algorithm, FederationInfo, ServerState, merge_sums
from fedsim.algorithms.registry import get_algorithm_class
from fedsim.checkpoint import Checkpoint, save_checkpoint
from fedsim.config import ExperimentConfig
from fedsim.data.datasets import ImageDataset, load_dataset
from fedsim.data.federated import FederatedData, build_federated_data
from fedsim.errors import ClientFailureError
from fedsim.metrics import best_and_final, summarize_clients
from fedsim.runtime.executor import Executor
from fedsim.runtime.state_store import ClientStateStore
from fedsim.runtime.worker import ClientResult, ClientTask, WorkerResult, WorkerSpec
from fedsim.tracking.base import ClientRow, RoundRecord, Sink
from lightning_modules.base import FLModule
from lightning_modules.flat_params import ParamLayout, flatten_module
from lightning_modules.registry import build_model


@functools.lru_cache(maxsize=4)
def cached_dataset(name: str, root: str, download: bool) -> ImageDataset:
    """Load a dataset once per process (tests and sweeps reuse it)."""
    return load_dataset(name, root, download=download)


def build_data(cfg: ExperimentConfig, dataset: ImageDataset | None = None) -> FederatedData:
    """The config's dataset (or ``dataset``, e.g. a subset of it), partitioned and split per
    client as the config says (raises ConfigError)."""
    d = cfg.data
    if dataset is None:
        dataset = cached_dataset(d.name, d.root, d.download)
    return build_federated_data(
        dataset,
        d.num_clients,
        d.partition.name,
        alpha=d.partition.alpha,
        classes_per_client=d.partition.classes_per_client,
        train_ratio=d.train_ratio,
        seed=cfg.seed,
    )


def model_kwargs(cfg: ExperimentConfig, data: FederatedData) -> dict[str, Any]:
    ds = data.dataset
    return {
        "in_channels": ds.in_channels,
        "num_classes": ds.num_classes,
        "image_size": ds.image_size,
        "lr": cfg.client.lr,
        "momentum": cfg.client.momentum,
        "weight_decay": cfg.client.weight_decay,
    }


def federation_info(module: FLModule, data: FederatedData) -> FederationInfo:
    return FederationInfo(
        layout=ParamLayout.from_module(module),
        num_clients=data.num_clients,
        num_classes=data.num_classes,
        train_sizes=data.train_sizes(),
        class_counts=data.class_counts("train"),
        head_names=module.head_parameters(1),
        block_names=list(module.block_names),
        block_parameters={b: module.block_parameters(b) for b in module.block_names},
        client_train_indices=[c.train for c in data.clients],
    )


@dataclass
class RunResult:
    summary: dict[str, Any]
    history: list[dict[str, Any]]
    state: ServerState
    run_dir: Path | None = None
    client_store: ClientStateStore = field(default_factory=ClientStateStore)


def aggregation_shares(results: list[ClientResult]) -> dict[int, float]:
    """Each trained client's share of the round's aggregate: its weight over the summed
    weight, averaged over the weighted sums the algorithm keeps (FedAvg: n_i / sum n;
    FedVG: its validation-gradient weight; ``avg`` mode: the mean of the two)."""
    totals: dict[str, float] = {}
    for c in results:
        for key, weight in c.weights.items():
            totals[key] = totals.get(key, 0.0) + weight
    shares = {}
    for c in results:
        parts = [w / totals[k] for k, w in c.weights.items() if totals[k] > 0]
        if parts:
            shares[c.client] = float(np.mean(parts))
    return shares


class Simulation:
    """One experiment: everything that can fail on bad input is built in ``__init__``."""

    def __init__(self, cfg: ExperimentConfig, data: FederatedData | None = None):
        self.cfg = cfg
        self.data = data if data is not None else build_data(cfg)
        torch.manual_seed(cfg.seed)
        template = build_model(cfg.model.name, **model_kwargs(cfg, self.data))
        self.initial_params = flatten_module(template)
        self.federation = federation_info(template, self.data)
        algo_cls = get_algorithm_class(cfg.algorithm.name)
        self.algorithm: Algorithm = algo_cls(cfg.algorithm.params, self.federation)
        d = cfg.data
        self.data = self.algorithm.prepare_data(
            self.data, lambda name: cached_dataset(name, d.root, d.download), cfg.seed
        )
        self.worker_spec = WorkerSpec(
            model_name=cfg.model.name,
            model_kwargs=model_kwargs(cfg, self.data),
            algorithm=self.algorithm,
            epochs=cfg.client.epochs,
            batch_size=cfg.client.batch_size,
            eval_batch_size=cfg.client.eval_batch_size,
            seed=cfg.seed,
        )

    def sample_cohort(self, round_idx: int) -> list[int]:
        """``int(join_ratio * clients)`` clients (at least 1), seeded by (seed, round)."""
        n = self.data.num_clients
        size = max(1, int(self.cfg.join_ratio * n))
        rng = np.random.default_rng([self.cfg.seed, round_idx, 7])
        return sorted(rng.choice(n, size=size, replace=False).tolist())

    def run(
        self,
        executor: Executor,
        sinks: list[Sink] | None = None,
        *,
        run_dir: Path | None = None,
        resume: Checkpoint | None = None,
    ) -> RunResult:
        """Run every round through ``executor``; feed ``sinks``; return the summary.

        With ``run_dir`` and ``checkpoint_every`` > 0, checkpoints go to ``run_dir``; with
        ``resume``, the run continues from that checkpoint (its rounds replayed to the sinks).
        """
        cfg, sinks = self.cfg, sinks or []
        state = self.algorithm.init_state(self.initial_params)
        budget_gb = cfg.runtime.state_memory_gb
        store = ClientStateStore(None if budget_gb is None else int(budget_gb * 2**30))
        history: list[dict[str, Any]] = []
        checkpointing = run_dir is not None and cfg.checkpoint_every > 0
        records: list[RoundRecord] = []  # kept for checkpoints only
        first_round = 0
        if resume is not None:
            state, first_round = resume.state, resume.rounds_trained
            for client, client_state in resume.client_states.items():
                store.put(client, client_state)
            for record in resume.records:
                records.append(record)
                history.append({"round": record.round, **record.summary})
                for sink in sinks:
                    sink.log_round(record)
        num_classes = (self.data.class_counts("train") > 0).sum(axis=1)
        for round_idx in range(first_round, cfg.rounds + 1):
            began = time.perf_counter()
            training = round_idx < cfg.rounds
            evaluating = round_idx % cfg.eval_every == 0 or round_idx == cfg.rounds
            cohort = set(self.sample_cohort(round_idx)) if training else set()
            everyone = range(self.data.num_clients) if evaluating else sorted(cohort)
            broadcast = self.algorithm.broadcast(state)
            tasks = [
                ClientTask(
                    client=c,
                    payload=self.algorithm.client_payload(state, c),
                    state=store.get(c),
                    evaluate=evaluating,
                    train=c in cohort,
                )
                for c in everyone
            ]
            download = sum(
                self.algorithm.download_nbytes(broadcast, t.payload, t.state)
                for t in tasks
                if t.train
            )
            worker_results = executor.run_round(round_idx, broadcast, tasks)
            results = sorted((c for w in worker_results for c in w.clients), key=lambda c: c.client)
            failed = [c.client for c in results if c.failed]
            if cohort and len(failed) > cfg.max_failed_fraction * len(cohort):
                raise ClientFailureError(
                    f"round {round_idx}: {len(failed)} of {len(cohort)} clients had non-finite "
                    f"losses (clients {failed[:10]}); allowed fraction max_failed_fraction="
                    f"{cfg.max_failed_fraction}; lower client.lr?"
                )
            for c in results:
                if c.state is not None:
                    store.put(c.client, c.state)
            if training:
                sums = merge_sums([w.sums for w in worker_results])
                individual = {c.client: c.individual for c in results if c.individual is not None}
                state = self.algorithm.aggregate(state, sums, individual, round_idx)
            summary = self._round_summary(round_idx, results, worker_results, failed, began)
            if training:
                summary["bytes_down"] = download
                summary["bytes_up"] = sum(c.upload_bytes for c in results)
            record = RoundRecord(round=round_idx, summary=summary)
            shares = aggregation_shares(results)
            record.clients = [
                ClientRow(
                    client=c.client,
                    round=round_idx,
                    accuracy=c.evaluation.correct / max(c.evaluation.num_samples, 1),
                    loss=c.evaluation.loss_sum / max(c.evaluation.num_samples, 1),
                    n=c.evaluation.num_samples,
                    classes=int(num_classes[c.client]),
                    weight=shares.get(c.client),
                )
                for c in results
                if c.evaluation is not None
            ]
            history.append({"round": round_idx, **summary})
            for sink in sinks:
                sink.log_round(record)
            if checkpointing:
                records.append(record)
                trained = round_idx + 1
                if training and (trained % cfg.checkpoint_every == 0 or trained == cfg.rounds):
                    states = {c: store.get(c) for c in store.clients()}
                    save_checkpoint(
                        run_dir, Checkpoint(trained, cfg.to_dict(), state, states, records)
                    )
        summary = best_and_final(history)
        for sink in sinks:
            sink.finish(summary)
        return RunResult(summary=summary, history=history, state=state, client_store=store)

    @staticmethod
    def _round_summary(
        round_idx: int,
        results: list[ClientResult],
        worker_results: list[WorkerResult],
        failed: list[int],
        began: float,
    ) -> dict[str, Any]:
        summary: dict[str, Any] = {}
        evaluated = [c.evaluation for c in results if c.evaluation is not None]
        if evaluated:
            summary.update(
                summarize_clients(
                    np.array([e.correct for e in evaluated]),
                    np.array([e.num_samples for e in evaluated]),
                    np.array([e.loss_sum for e in evaluated]),
                )
            )
        losses = [c.train_loss for c in results if c.train_loss is not None and not c.failed]
        if losses:
            summary["train_loss"] = float(np.mean(losses))
        summary["num_trained"] = sum(c.train_loss is not None for c in results) - len(failed)
        if failed:
            summary["failed_clients"] = failed
        seconds = time.perf_counter() - began
        summary["seconds"] = seconds
        summary["train_seconds_max_worker"] = max(
            (w.train_seconds for w in worker_results), default=0
        )
        return summary
