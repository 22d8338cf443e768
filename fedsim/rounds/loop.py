"""The one round loop: what every run does each round, whatever trains it.

Per round: plan it (the cohort sampled from ``(seed, round)``, who is evaluated), ask the
round kind for its work, then commit it whole with Ctrl-C / SIGTERM held back (client
states stored, the aggregate made, the record logged to every sink, a checkpoint written
every ``checkpoint_every`` rounds), and at the end hand every sink the run's summary. The
loop never asks which kind it runs.

Evaluation follows PFLlib: in an evaluation round every client evaluates the model it
received (personalized where the algorithm personalizes) on its own test split, before it
trains. Round ``rounds`` is a final evaluation-only round after the last aggregation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.algorithms.base import Algorithm
from fedsim.checkpoint import Checkpoint, latest_checkpoint, save_checkpoint
from fedsim.config import ExperimentConfig
from fedsim.deployment.driver import Deployment, privacy_summary
from fedsim.interrupts import Interruption, deferred_interrupt
from fedsim.metrics import best_and_final
from fedsim.rounds.kind import RoundKind, RoundPlan, RoundWork
from fedsim.rounds.records import divergence_error, failure_warning, round_record, round_summary
from fedsim.rounds.result import RunResult
from fedsim.runtime.executor import Executor
from fedsim.storage import ClientStateStore
from fedsim.tracking.base import RoundRecord, Sink


class RoundLoop:
    """Runs rounds 0..``rounds`` of one experiment through ``kind`` (see the module doc)."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        algorithm: Algorithm,
        kind: RoundKind,
        deployment: Deployment,
        num_classes: np.ndarray,
        sample_cohort: Callable[[int], list[int]],
    ):
        self.cfg, self.algorithm, self.kind, self.deployment = cfg, algorithm, kind, deployment
        self.num_classes = num_classes  # classes each client holds (clients.csv)
        self.sample_cohort = sample_cohort
        self.num_clients = len(num_classes)
        self.interrupted: Interruption | None = None

    def plan(self, round_idx: int) -> RoundPlan:
        cfg = self.cfg
        training = round_idx < cfg.rounds
        evaluating = round_idx % cfg.eval_every == 0 or round_idx == cfg.rounds
        evaluated = [
            c for c in range(self.num_clients) if evaluating and self.algorithm.evaluates(c)
        ]
        cohort = self.sample_cohort(round_idx) if training else []
        return RoundPlan(round_idx, training, frozenset(evaluated), frozenset(cohort))

    def run(
        self,
        executor: Executor,
        initial_params: torch.Tensor,
        sinks: list[Sink] | None = None,
        *,
        run_dir: Path | None = None,
        resume: Checkpoint | None = None,
    ) -> RunResult:
        """Every round through ``executor``; ``sinks`` get every record and the summary.

        With ``run_dir`` and ``checkpoint_every`` > 0, checkpoints go to ``run_dir``; with
        ``resume``, the run continues from that checkpoint (its rounds replayed to the sinks).
        """
        cfg, sinks = self.cfg, sinks or []
        budget_gb = cfg.runtime.state_memory_gb
        store = ClientStateStore(None if budget_gb is None else int(budget_gb * 2**30))
        state = self.algorithm.init_state(initial_params)
        history: list[dict[str, Any]] = []
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
        self.kind.start(executor, state, None if resume is None else resume.round_kind)
        checkpointing = run_dir is not None and cfg.checkpoint_every > 0
        self.interrupted = None
        done = first_round  # rounds completed: the next round to run
        saved = first_round if resume is not None else -1  # rounds in the newest checkpoint

        def checkpoint_now() -> Path:
            checkpoint = Checkpoint(
                done, cfg.to_dict(), state, {c: store.get(c) for c in store.clients()},
                records, self.algorithm, self.deployment.state_dict(), self.kind.state_dict(),
            )  # fmt: skip
            return save_checkpoint(run_dir, checkpoint)

        try:
            for round_idx in range(first_round, cfg.rounds + 1):
                began = time.perf_counter()
                plan = self.plan(round_idx)
                work = self.kind.work(plan, state, store)
                with deferred_interrupt():  # commit the round whole, or not at all
                    failed = work.failed
                    cohort = work.cohort
                    diverged = bool(cohort) and len(failed) > cfg.max_failed_fraction * len(cohort)
                    if not diverged:
                        state = self.kind.commit(plan, work, state, store)
                    record = self.record(plan, work, failed, diverged, began)
                    history.append({"round": round_idx, **record.summary})
                    for sink in sinks:
                        sink.log_round(record)
                    if diverged:
                        self.finish(sinks, history, "diverged", done)
                        raise divergence_error(
                            round_idx, failed, work.cohort_label, cfg.max_failed_fraction, done
                        )
                    done = round_idx + 1
                    if checkpointing:
                        records.append(record)
                        if plan.training and (
                            done % cfg.checkpoint_every == 0 or done == cfg.rounds
                        ):
                            checkpoint_now()
                            saved = done
        except KeyboardInterrupt:
            path = None
            if checkpointing:
                path = checkpoint_now() if saved < done <= cfg.rounds else None
                path = path or latest_checkpoint(run_dir)
            self.interrupted = Interruption(done, path)
            self.finish(sinks, history, "interrupted", done)
            raise
        summary = self.finish(sinks, history, "completed", done)
        return RunResult(summary=summary, history=history, state=state, client_store=store)

    def record(
        self, plan: RoundPlan, work: RoundWork, failed: list[int], diverged: bool, began: float
    ) -> RoundRecord:
        """The round's record: metrics.jsonl's summary and clients.csv's rows."""
        summary = round_summary(work.results, work.worker_results, failed, began)
        summary.update(work.timing)
        if failed:
            summary["warnings"] = [failure_warning(failed, work.cohort, diverged)]
        if plan.training:
            summary["bytes_down"] = work.bytes_down
            summary["bytes_up"] = sum(c.upload_bytes for c in work.results)
            summary.update(self.deployment.round_summary())
            summary.update(work.extras)
        record = round_record(plan.round, summary, work.results, self.num_classes, work.weights)
        self.deployment.annotate(record)
        return record

    @staticmethod
    def finish(
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
