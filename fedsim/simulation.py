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

from fedsim.algorithms.base import (
    Algorithm,
    ExchangeRound,
    FederationInfo,
    ServerState,
)
from fedsim.algorithms.registry import get_algorithm_class
from fedsim.checkpoint import Checkpoint, latest_checkpoint, save_checkpoint
from fedsim.config import ExperimentConfig
from fedsim.data.datasets import Dataset, load_dataset
from fedsim.data.federated import FederatedData, build_federated_data, stratified_subset
from fedsim.deployment.async_rounds import run_async, timing
from fedsim.deployment.driver import Deployment, privacy_summary
from fedsim.interrupts import Interruption, deferred_interrupt
from fedsim.metrics import best_and_final
from fedsim.round_records import (
    divergence_error,
    failure_warning,
    round_record,
    round_summary,
)
from fedsim.runtime.executor import Executor
from fedsim.runtime.worker import ClientTask, WorkerSpec
from fedsim.storage import ClientStateStore
from fedsim.tracking.base import RoundRecord, Sink
from lightning_modules.base import FLModule
from lightning_modules.flat_params import ParamLayout, flatten_module
from lightning_modules.registry import build_model


@functools.lru_cache(maxsize=4)
def cached_dataset(name: str, root: str, download: bool) -> Dataset:
    """Load a dataset once per process (tests and sweeps reuse it)."""
    return load_dataset(name, root, download=download)


def build_data(cfg: ExperimentConfig, dataset: Dataset | None = None) -> FederatedData:
    """The config's dataset (or ``dataset``, e.g. a subset of it), partitioned and split per
    client as the config says (raises ConfigError)."""
    d = cfg.data
    if dataset is None:
        dataset = cached_dataset(d.name, d.root, d.download)
    return build_federated_data(
        stratified_subset(dataset, d.max_samples),
        d.num_clients,
        d.partition.name,
        alpha=d.partition.alpha,
        classes_per_client=d.partition.classes_per_client,
        train_ratio=d.train_ratio,
        seed=cfg.seed,
        clusters=d.partition.clusters,
        step=d.partition.step,
        base=d.partition.base,
        sigma=d.partition.sigma,
        min_samples=d.min_samples,
        max_client_samples=d.max_client_samples,
        plays=d.plays,
    )


def model_kwargs(cfg: ExperimentConfig, data: FederatedData) -> dict[str, Any]:
    return {
        **data.dataset.model_kwargs(),  # images: in_channels, image_size; text: vocab_size, seq_len
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
        client_clusters=data.partition.get("client_clusters"),
    )


@dataclass
class RunResult:
    summary: dict[str, Any]
    history: list[dict[str, Any]]
    state: ServerState
    run_dir: Path | None = None
    client_store: ClientStateStore = field(default_factory=ClientStateStore)


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
        cohort_size = max(1, int(cfg.join_ratio * self.data.num_clients))
        self.deployment = Deployment(cfg, self.algorithm, self.data.num_clients, cohort_size)
        # the virtual clock (asynchronous.*): async rounds, or a sync run's sim_time; else None
        self.timing = timing(cfg, self.algorithm, self.data, cohort_size, self.sample_cohort)
        self.worker_spec = WorkerSpec(
            model_name=cfg.model.name,
            model_kwargs=model_kwargs(cfg, self.data),
            algorithm=self.algorithm,
            epochs=cfg.client.epochs,
            batch_size=cfg.client.batch_size,
            eval_batch_size=cfg.client.eval_batch_size,
            seed=cfg.seed,
            clip_grad_norm=cfg.client.clip_grad_norm,
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
        if cfg.asynchronous.enabled:  # rounds are server aggregations in virtual time
            return run_async(self, executor, sinks, run_dir=run_dir, resume=resume)
        state = self.algorithm.init_state(self.initial_params)
        budget_gb = cfg.runtime.state_memory_gb
        store = ClientStateStore(None if budget_gb is None else int(budget_gb * 2**30))
        history: list[dict[str, Any]] = []
        checkpointing = run_dir is not None and cfg.checkpoint_every > 0
        records: list[RoundRecord] = []  # kept for checkpoints only
        first_round = 0
        self.deployment.load_state_dict(None if resume is None else resume.deployment)
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
        self.interrupted: Interruption | None = None
        done = first_round  # rounds completed: the next round to run
        saved = first_round if resume is not None else -1  # rounds in the newest checkpoint

        def checkpoint_now() -> Path:
            states = {c: store.get(c) for c in store.clients()}
            checkpoint = Checkpoint(
                done, cfg.to_dict(), state, states, records, self.algorithm,
                self.deployment.state_dict(),
            )  # fmt: skip
            return save_checkpoint(run_dir, checkpoint)

        try:
            for round_idx in range(first_round, cfg.rounds + 1):
                began = time.perf_counter()
                training = round_idx < cfg.rounds
                evaluating = round_idx % cfg.eval_every == 0 or round_idx == cfg.rounds
                exchanging = training and self.algorithm.trains_by_exchange
                cohort = set(self.sample_cohort(round_idx)) if training else set()
                cohort = set() if exchanging else cohort  # train_round trains, not the tasks
                evaluated = {c for c in range(self.data.num_clients) if evaluating}
                evaluated = {c for c in evaluated if self.algorithm.evaluates(c)}
                everyone = sorted(evaluated | cohort)
                broadcast = self.algorithm.broadcast(state)
                tasks = [
                    ClientTask(
                        client=c,
                        payload=self.algorithm.client_payload(state, c),
                        state=store.get(c),
                        evaluate=c in evaluated,
                        train=c in cohort,
                    )
                    for c in everyone
                ]
                self.deployment.prepare(round_idx, tasks)
                download = sum(
                    self.algorithm.download_nbytes(broadcast, t.payload, t.state)
                    for t in tasks
                    if t.train
                )
                worker_results = executor.run_round(round_idx, broadcast, tasks)
                report = None
                if exchanging:  # many gradient exchanges, after the round's evaluation
                    trained_state, report = self.algorithm.train_round(
                        state, self.exchange_round(executor, round_idx)
                    )
                with deferred_interrupt():  # commit the round whole, or not at all
                    results = sorted(
                        (c for w in worker_results for c in w.clients), key=lambda c: c.client
                    )
                    failed = [c.client for c in results if c.failed]
                    diverged = bool(cohort) and len(failed) > cfg.max_failed_fraction * len(cohort)
                    if not diverged:
                        for c in results:
                            if c.state is not None:
                                store.put(c.client, c.state)
                        if report is not None:
                            state = trained_state
                        elif training:
                            sums = self.deployment.combine(
                                round_idx, [w.sums for w in worker_results], results
                            )
                            individual = {
                                c.client: c.individual for c in results if c.individual is not None
                            }
                            state = self.algorithm.aggregate(state, sums, individual, round_idx)
                    summary = round_summary(results, worker_results, failed, began)
                    if self.timing is not None:  # asynchronous.speeds set: the virtual time
                        summary["sim_time"] = self.timing.time_at(round_idx)
                    if failed:
                        summary["warnings"] = [failure_warning(failed, cohort, diverged)]
                    if training:
                        summary["bytes_down"] = download
                        summary["bytes_up"] = sum(c.upload_bytes for c in results)
                        summary.update(self.deployment.round_summary())
                    weights = None
                    if report is not None:
                        summary.update(report.summary)
                        weights = report.client_weights
                    record = round_record(round_idx, summary, results, num_classes, weights)
                    self.deployment.annotate(record)
                    history.append({"round": round_idx, **summary})
                    for sink in sinks:
                        sink.log_round(record)
                    if diverged:
                        self._finish(sinks, history, "diverged", done)
                        raise divergence_error(
                            round_idx, failed, f"{len(cohort)} clients", cfg.max_failed_fraction,
                            done,
                        )  # fmt: skip
                    done = round_idx + 1
                    if checkpointing:
                        records.append(record)
                        if training and (done % cfg.checkpoint_every == 0 or done == cfg.rounds):
                            checkpoint_now()
                            saved = done
        except KeyboardInterrupt:
            path = None
            if checkpointing:
                path = checkpoint_now() if done > saved and done <= cfg.rounds else None
                path = path or latest_checkpoint(run_dir)
            self.interrupted = Interruption(done, path)
            self._finish(sinks, history, "interrupted", done)
            raise
        summary = self._finish(sinks, history, "completed", done)
        return RunResult(summary=summary, history=history, state=state, client_store=store)

    def exchange_round(self, executor: Executor, round_idx: int) -> ExchangeRound:
        """The context of a ``train_round``: client settings and the executor's exchange."""
        return ExchangeRound(
            round=round_idx,
            seed=self.cfg.seed,
            lr=self.cfg.client.lr,
            batch_size=self.cfg.client.batch_size,
            exchange=lambda tasks, broadcast: executor.exchange(round_idx, broadcast, tasks),
        )

    @staticmethod
    def _finish(
        sinks: list[Sink], history: list[dict[str, Any]], status: str, done: int
    ) -> dict[str, Any]:
        """best/final over the rounds run, with how the run ended; handed to every sink."""
        summary: dict[str, Any] = {**best_and_final(history), "status": status}
        privacy = privacy_summary(history)
        if privacy is not None:
            summary["privacy"] = privacy
        if status != "completed":
            summary["rounds_completed"] = done
        for sink in sinks:
            sink.finish(summary)
        return summary
