"""The one round loop: what every run does each round, whatever trains it.

Per round: plan it (the cohort sampled from ``(seed, round)``, who is evaluated), ask the
round kind for its work, then commit it whole with Ctrl-C / SIGTERM held back (client
states stored, the aggregate made, the record logged to every sink, a checkpoint written
every ``checkpoint_every`` rounds), and at the end hand every sink the run's summary. A sink
may end the run by raising ``Stopped`` (a Tune trial its scheduler stopped): it takes effect
once the round is committed, like Ctrl-C, and the summary says ``stopped``. A run that
raises says ``failed``, with the error line and the rounds completed. The loop never asks
which kind it runs.

Evaluation follows PFLlib by default: in an evaluation round every client evaluates the model
it received (personalized where the algorithm personalizes) on its own test split, before it
trains (``eval.when=after_training``: a client that trains is evaluated on the model it keeps);
held-out clients (``eval.holdout_clients``) are evaluated as newcomers. Round ``rounds`` is a
final evaluation-only round after the last aggregation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.algorithms.base import Algorithm, ServerState
from fedsim.checkpoint import Checkpoint, latest_checkpoint, save_checkpoint
from fedsim.config import ExperimentConfig
from fedsim.deployment.driver import Deployment, privacy_summary
from fedsim.errors import ClientFailureError, error_line, show_value
from fedsim.interrupts import Interruption, Stopped, deferred_interrupt, stop_reason, stop_signals
from fedsim.metrics import best_and_final, cost_per_client_round, time_to_accuracy
from fedsim.rounds.kind import RoundKind, RoundPlan, RoundWork
from fedsim.rounds.records import divergence_error, failure_warning, round_record, round_summary
from fedsim.rounds.result import RunResult
from fedsim.run_plan import RunPlan
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
        plan: RunPlan,
        tokens: bool = False,
    ):
        """``plan``: the run plan (each round's lr and scheduled values come from it);
        ``tokens``: the data is next-token prediction (perplexities are recorded)."""
        self.cfg, self.algorithm, self.kind, self.deployment = cfg, algorithm, kind, deployment
        assert plan.values is not None, "resolve_run_plan gives every plan its values"
        self.values = plan.values
        self.num_classes = num_classes  # classes each client holds (clients.csv; held-out too)
        self.sample_cohort = sample_cohort
        self.num_clients = len(num_classes)
        self.tokens = tokens
        self.interrupted: Interruption | None = None
        # called with (rounds done, server state, client store) after each training round is
        # committed (adapters.save_every: the adapters written as peft folders)
        self.after_commit: Callable[[int, ServerState, ClientStateStore], Any] | None = None

    def plan(self, round_idx: int) -> RoundPlan:
        cfg = self.cfg
        training = round_idx < cfg.rounds
        evaluating = round_idx % cfg.eval_every == 0 or round_idx == cfg.rounds
        members = self.algorithm.federation.num_clients  # then the held-out clients
        evaluated = [
            c
            for c in range(self.num_clients)
            if evaluating and (c >= members or self.algorithm.evaluates(c))
        ]
        cohort = self.sample_cohort(round_idx) if training else []
        return RoundPlan(
            round_idx, training, frozenset(evaluated), frozenset(cohort), self.values
        )

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
        cfg = self.cfg
        run = _Progress(self, sinks or [], run_dir if cfg.checkpoint_every > 0 else None)
        self.interrupted = None
        try:
            run.start(initial_params, resume)
            self.kind.start(executor, run.state, None if resume is None else resume.round_kind)
            self.run_rounds(run)
        except ClientFailureError:
            raise  # diverged: its summary says so already
        except Exception as err:  # the folder keeps what ran, and says how it ended
            self.finish(run.sinks, run.history, "failed", run.done, error_line(err))
            raise
        summary = self.finish(run.sinks, run.history, "completed", run.done)
        return RunResult(summary, run.history, run.state, client_store=run.store)

    def run_rounds(self, run: _Progress) -> None:
        """Rounds ``run.done``..``rounds``, each committed whole; Ctrl-C, SIGTERM or a sink's
        ``Stopped`` ends the run after the round in progress (``interrupted`` says where)."""
        with stop_signals():  # SIGTERM stops the run as Ctrl-C does
            try:
                for round_idx in range(run.done, self.cfg.rounds + 1):
                    began = time.perf_counter()
                    plan = self.plan(round_idx)
                    work = self.kind.work(plan, run.state, run.store)
                    with deferred_interrupt():  # commit the round whole, or not at all
                        run.commit(plan, work, began)
            except KeyboardInterrupt as stop:
                reason = stop_reason(stop)
                self.interrupted = Interruption(run.done, run.checkpoint_on_stop(), reason)
                status = "stopped" if reason == "stopped" else "interrupted"
                self.finish(run.sinks, run.history, status, run.done)
                raise

    def record(
        self, plan: RoundPlan, work: RoundWork, failed: list[int], diverged: bool, began: float
    ) -> RoundRecord:
        """The round's record: metrics.jsonl's summary and clients.csv's rows."""
        summary = round_summary(work.results, work.worker_results, failed, began, self.tokens)
        summary.update(work.timing)
        if failed:
            summary["warnings"] = [failure_warning(failed, work.cohort, diverged)]
        if plan.training:  # the lr every client used and the round's scheduled keys
            summary.update(self.values.at(plan.round).recorded)
        if plan.training:
            summary["bytes_down"] = work.bytes_down
            summary["bytes_up"] = sum(c.upload_bytes for c in work.results)
            summary.update(work.extras)
        record = round_record(
            plan.round, summary, work.results, self.num_classes, work.weights, self.tokens
        )
        self.deployment.annotate(record)
        return record

    def finish(
        self,
        sinks: list[Sink],
        history: list[dict[str, Any]],
        status: str,
        done: int,
        error: str | None = None,
    ) -> dict[str, Any]:
        """The run's summary (``run_summary``), handed to every sink."""
        summary = run_summary(
            history, status, done, error, self.cfg.eval.target_acc,
            (self.cfg.eval.select_on, self.tokens),
        )  # fmt: skip
        for sink in sinks:
            sink.finish(summary)
        return summary


def run_summary(
    history: list[dict[str, Any]],
    status: str,
    done: int,
    error: str | None = None,
    targets: list[float] | None = None,
    select: tuple[str, bool | None] = ("auto", None),
) -> dict[str, Any]:
    """summary.json: best/final over the rounds run, rounds (and virtual time) to each
    ``targets`` accuracy (``select``: eval.select_on and whether the data is next-token
    prediction: what "best" is chosen on), and how the run ended (``status``; unless completed,
    ``rounds_completed``: ``done``; a failed run's ``error`` line)."""
    summary: dict[str, Any] = {**best_and_final(history, *select), "status": status}
    summary.update(time_to_accuracy(history, targets or []))
    summary.update(cost_per_client_round(history))  # eval.count_flops: per client round
    privacy = privacy_summary(history)
    if privacy is not None:
        summary["privacy"] = privacy
    if status != "completed":
        summary["rounds_completed"] = done
    if error is not None:
        summary["error"] = error
    return summary


class _Progress:
    """A run's state between rounds: the server state, client states, records, rounds done."""

    def __init__(self, loop: RoundLoop, sinks: list[Sink], checkpoints: Path | None):
        self.loop, self.sinks, self.checkpoints = loop, sinks, checkpoints
        budget_gb = loop.cfg.runtime.state_memory_gb
        self.store = ClientStateStore(None if budget_gb is None else int(budget_gb * 2**30))
        self.history: list[dict[str, Any]] = []
        self.records: list[RoundRecord] = []  # kept for checkpoints only
        self.done = 0  # rounds completed: the next round to run
        self.saved = -1  # rounds in the newest checkpoint

    def start(self, initial_params: torch.Tensor, resume: Checkpoint | None) -> None:
        """Round 0's state, or a checkpoint's (its rounds replayed to the sinks)."""
        loop = self.loop
        self.state: ServerState = loop.algorithm.init_state(initial_params)
        loop.deployment.load_state_dict(None if resume is None else resume.deployment)
        if resume is None:
            return
        self.state, self.done = resume.state, resume.rounds_trained
        self.saved = resume.rounds_trained
        for client, client_state in resume.client_states.items():
            self.store.put(client, client_state)
        for record in resume.records:
            self.records.append(record)
            self.history.append({"round": record.round, **record.summary})
            for sink in self.sinks:
                sink.log_round(record)
        loop.values.replay(self.history)  # adaptive values: their state after those rounds

    def commit(self, plan: RoundPlan, work: RoundWork, began: float) -> None:
        """Apply, record and checkpoint one round (with Ctrl-C / SIGTERM held back)."""
        loop, cfg = self.loop, self.loop.cfg
        failed = work.failed
        diverged = bool(work.cohort) and len(failed) > cfg.max_failed_fraction * len(work.cohort)
        if not diverged:
            self.state = loop.kind.commit(plan, work, self.state, self.store)
        record = loop.record(plan, work, failed, diverged, began)
        self.history.append({"round": plan.round, **record.summary})
        loop.values.observe(plan.round, record.summary)  # adaptive values see the round
        stopped: Stopped | None = None
        for sink in self.sinks:
            try:
                sink.log_round(record)
            except Stopped as stop:  # raised once the round is committed whole, as Ctrl-C is
                stopped = stop
        if diverged:
            loop.finish(self.sinks, self.history, "diverged", self.done)
            raise divergence_error(
                plan.round, failed, work.cohort_label, cfg.max_failed_fraction, self.done,
                divergence_hint(cfg),
            )  # fmt: skip
        self.done = plan.round + 1
        if plan.training and loop.after_commit is not None:
            loop.after_commit(self.done, self.state, self.store)
        if self.checkpoints is not None:
            self.records.append(record)
            if plan.training and (self.done % cfg.checkpoint_every == 0 or self.done == cfg.rounds):
                self.checkpoint()
        if stopped is not None:
            raise stopped

    def checkpoint(self) -> Path:
        assert self.checkpoints is not None
        loop = self.loop
        checkpoint = Checkpoint(
            self.done, loop.cfg.to_dict(), self.state,
            {c: self.store.get(c) for c in self.store.clients()}, self.records, loop.algorithm,
            loop.deployment.state_dict(), loop.kind.state_dict(),
        )  # fmt: skip
        self.saved = self.done
        return save_checkpoint(self.checkpoints, checkpoint)

    def checkpoint_on_stop(self) -> Path | None:
        """A stopped run's checkpoint: its last completed round's (written now if newer)."""
        if self.checkpoints is None:
            return None
        if self.saved < self.done <= self.loop.cfg.rounds:
            return self.checkpoint()
        return latest_checkpoint(self.checkpoints)


def divergence_hint(cfg: ExperimentConfig) -> str:
    """What to change when clients diverge: the learning rate, and the noise where DP adds it."""
    p = cfg.privacy
    lr = cfg.client.lr
    lr = f"client.lr={show_value(lr)}" + (" (the model's default)" if lr is None else "")
    if p.mode == "fixed_sigma":
        return f"lower {lr} or the noise privacy.sigma={p.sigma}?"
    if p.mode in ("local", "central") and p.noise_multiplier > 0:
        return (
            f"lower {lr}, or the noise (privacy.noise_multiplier={p.noise_multiplier}, std "
            f"z * privacy.clip_norm={p.clip_norm}), or add clients?"
        )
    return f"lower {lr}?"
