"""The deployment options on the driver: the upload pipeline's stages, what each client task
carries, and the state a checkpoint must keep.

The pipeline is a list of ``UploadStage`` s (``fedsim/deployment/stages/``), one per option
that is set, in client order: attack, clipping, compression, privacy noise, robust rule.
``prepare`` gives each training task its ``UploadJob`` (the algorithm's model upload and the
stages' client steps, decided here once); ``combine`` merges the round's sums by one route
(the workers' partial sums and the clients' own sums) and runs the server sides in reverse
order; ``annotate`` marks clients.csv. With every option at its default there is no stage
and none of them changes anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from fedsim.algorithms.base import Algorithm
from fedsim.algorithms.sums import WeightedSum, merge_sums
from fedsim.deployment.checks import check_deployment
from fedsim.deployment.decision import decide_upload
from fedsim.deployment.stages.attack import AttackStage
from fedsim.deployment.stages.base import ServerAggregation, UploadStage
from fedsim.deployment.stages.clip import ClipStage
from fedsim.deployment.stages.compress import CompressStage
from fedsim.deployment.stages.noise import NoiseStage
from fedsim.deployment.stages.robust import RobustStage
from fedsim.deployment.upload import UploadJob
from fedsim.run_plan import RunPlan


@dataclass
class Rebase:
    """Asynchronous rounds: every update is moved onto ``params`` (the newest server model)
    with its delta times its client's staleness discount (``scales``)."""

    params: torch.Tensor
    scales: dict[int, float] = field(default_factory=dict)


@dataclass
class Combined:
    """What ``combine`` hands the algorithm, and the summary keys the stages add."""

    sums: dict[str, WeightedSum]
    metrics: dict[str, Any] = field(default_factory=dict)


class Deployment:
    """The run's deployment options, checked at construction (one-line ConfigErrors).

    From the run plan: the updates the server combines at once (a round's cohort, an
    asynchronous run's buffer), and whether each server update's clients are a sample of
    the federation (synchronous rounds: central DP is accounted with sampling amplification
    at rate cohort / clients); asynchronous arrivals are not, so their central noise is
    accounted per participation of the most frequent client, without amplification.
    """

    def __init__(self, cfg: Any, algorithm: Algorithm, plan: RunPlan):
        check_deployment(cfg, algorithm, plan.server_cohort, plan.cohort_source, plan.num_clients)
        self.cfg, self.algorithm, self.seed = cfg, algorithm, cfg.seed
        sampled = plan.kind != "buffered"
        self.stages = build_stages(
            cfg, plan.num_clients, plan.server_cohort, sampled, algorithm.federation.num_classes
        )
        self.attack = self.stage(AttackStage)
        self.individual = any(s.needs_individual for s in self.stages)
        self.need_delta = any(s.needs_delta for s in self.stages)

    @property
    def active(self) -> bool:
        return bool(self.stages)

    def stage(self, kind: type[UploadStage]) -> UploadStage | None:
        """The pipeline's stage of type ``kind`` (None: that option is off)."""
        return next((s for s in self.stages if isinstance(s, kind)), None)

    # --- per round ---
    def prepare(
        self,
        round_idx: int,
        tasks: list[Any],
        rebase: Rebase | None = None,
        individual: bool = False,
    ) -> None:
        """Give every training task its ``UploadJob`` (none when no option is set and the
        round kind asks for no ``rebase``: the default path is untouched). ``individual``:
        every update comes on its own (a synchronous round that may leave some out)."""
        if not self.active and rebase is None and not individual:
            return
        for task in tasks:
            if not task.train:
                continue
            c = task.client
            steps = (s.client_step(c, round_idx) for s in self.stages)
            views = (s.training_view(c, round_idx) for s in self.stages)
            task.upload = UploadJob(
                seed=self.seed,
                model=decide_upload(self.algorithm, c, round_idx),
                steps=tuple(step for step in steps if step is not None),
                views=tuple(view for view in views if view is not None),
                individual=self.individual or rebase is not None or individual,
                need_delta=self.need_delta,
            )
            if rebase is not None:
                task.upload.rebase, task.upload.delta_scale = rebase.params, rebase.scales[c]

    def combine(
        self, round_idx: int, worker_sums: list[dict[str, WeightedSum]], kept: list[Any]
    ) -> Combined:
        """The sums ``aggregate`` receives from one server update: the workers' partial sums
        and the ``kept`` clients' own sums merged, then each stage's server side."""
        own = [_own_sums(c) for c in kept if c.upload is not None and c.upload.sums is not None]
        sums = merge_sums([*worker_sums, *own])
        if not self.active:
            return Combined(sums)
        trained = [c for c in kept if c.train_loss is not None and not c.failed]
        patterns: tuple[str, ...] = ()
        for c in trained:
            upload = decide_upload(self.algorithm, c.client, round_idx)
            if upload is not None:
                patterns += tuple(p for p in upload.sums if p not in patterns)
        aggregation = ServerAggregation(
            round=round_idx,
            sums=sums,
            trained=trained,
            individual={c.client: c.upload.sums for c in trained if c.upload and c.upload.sums},
            patterns=patterns,
        )
        for stage in reversed(self.stages):
            stage.server(aggregation)
        return Combined(aggregation.sums, aggregation.metrics)

    # --- the run folder ---
    def annotate(self, record: Any) -> None:
        """Mark attackers in the round's client rows (clients.csv's ``attacked`` column)."""
        if self.attack is None:
            return
        for row in record.clients:
            row.attacked = row.client in self.attack.attackers

    def partition_info(self, partition: dict[str, Any]) -> dict[str, Any]:
        """partition.json with the attackers (when an attack is configured)."""
        return partition if self.attack is None else self.attack.partition_info(partition)

    # --- checkpoints ---
    def state_dict(self) -> dict[str, Any] | None:
        """What a resumed run needs (None when no option is set)."""
        if not self.active:
            return None
        state: dict[str, Any] = {}
        for stage in self.stages:
            state.update(stage.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Start afresh (None), or continue from a checkpoint's ``state_dict``."""
        for stage in self.stages:
            stage.load_state_dict(state)


def build_stages(
    cfg: Any, num_clients: int, cohort_size: int, sampled: bool, num_classes: int
) -> list[UploadStage]:
    """The stages of the options that are set, in client order."""
    a, p, c, k = cfg.aggregation, cfg.privacy, cfg.compression, cfg.attack
    stages: list[UploadStage] = []
    if k.kind != "none":
        stages.append(AttackStage(k, num_clients, cfg.seed, num_classes))
    clip = ClipStage(p, cfg.seed) if p.clip_norm is not None else None
    if clip is not None:
        stages.append(clip)
    if c.kind != "none":
        stages.append(CompressStage(c))
    if p.enabled:
        stages.append(
            NoiseStage(
                p, cfg.seed, lambda: None if clip is None else clip.value,
                num_clients=num_clients, cohort_size=cohort_size, sampled=sampled,
            )
        )  # fmt: skip
    if a.needs_individual:
        stages.append(RobustStage(a))
    return stages


def _own_sums(result: Any) -> dict[str, WeightedSum]:
    out: dict[str, WeightedSum] = {}
    for key, (weight, value) in result.upload.sums.items():
        out.setdefault(key, WeightedSum()).add(weight, value)
    return out


def privacy_summary(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """summary.json's ``privacy``: the last round's epsilon and delta (None: privacy off)."""
    spent = [h for h in history if "dp_delta" in h]
    if not spent:
        return None
    return {"epsilon": spent[-1]["epsilon"], "delta": spent[-1]["dp_delta"]}
