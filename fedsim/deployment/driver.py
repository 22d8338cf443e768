"""The deployment options on the driver: what each client task carries, the server stages,
the privacy spent, and the state a checkpoint must keep (error-feedback residuals, the
adaptive clip norm, participation counts).

The simulation calls ``prepare`` on a round's tasks, ``combine`` instead of merging the
workers' partial sums, ``round_summary`` for metrics.jsonl and ``annotate`` for clients.csv.
With every option at its default none of them changes anything.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fedsim.algorithms.base import Algorithm
from fedsim.algorithms.sums import WeightedSum, merge_sums
from fedsim.deployment.attacks import attackers
from fedsim.deployment.checks import check_deployment, non_default_options
from fedsim.deployment.client_stages import ClientUpload, UploadSettings
from fedsim.deployment.privacy import AdaptiveClipNorm
from fedsim.deployment.server_stages import add_central_noise, robust_sums
from fedsim.streams import CLIP_COUNT_TAG


class Deployment:
    """The run's deployment options, checked at construction (one-line ConfigErrors).

    ``cohort_size``: the updates the server combines at once (a round's cohort, an
    asynchronous run's buffer). ``sampled``: whether each server update's clients are a
    sample of the federation (synchronous rounds: central DP is accounted with sampling
    amplification at rate cohort / clients); asynchronous arrivals are not, so their central
    noise is accounted per participation of the most frequent client, without amplification.
    """

    def __init__(
        self,
        cfg: Any,
        algorithm: Algorithm,
        num_clients: int,
        cohort_size: int,
        *,
        sampled: bool = True,
        cohort_source: str = "join_ratio",
    ):
        check_deployment(cfg, algorithm, cohort_size, cohort_source)
        self.cfg, self.algorithm = cfg, algorithm
        self.num_clients, self.cohort_size, self.sampled = num_clients, cohort_size, sampled
        self.active = bool(non_default_options(cfg)) or cfg.attack.kind != "none"
        self.attackers = set(attackers(cfg.attack, num_clients, cfg.seed))
        p, c = cfg.privacy, cfg.compression
        local = p.mode if p.mode in ("local", "fixed_sigma") else "none"
        self.settings = UploadSettings(
            seed=cfg.seed,
            attack_kind=cfg.attack.kind,
            attack_factor=cfg.attack.factor,
            local_noise=local,
            noise_multiplier=p.noise_multiplier,
            sigma=p.sigma,
            compression=c.kind,
            threshold=c.threshold,
            fraction=c.fraction,
            error_feedback=c.error_feedback,
        )
        self.load_state_dict(None)

    # --- per round ---
    def clip_norm(self) -> float | None:
        """This round's clip norm C (adaptive: its current value)."""
        return self.adaptive.value if self.adaptive is not None else self.cfg.privacy.clip_norm

    def attacking(self, client: int, round_idx: int) -> bool:
        return client in self.attackers and round_idx >= self.cfg.attack.start_round

    def prepare(self, round_idx: int, tasks: list[Any]) -> None:
        """Give every training task its client stages (nothing when no option is set)."""
        if not self.active:
            return
        a = self.cfg.aggregation
        need_delta = a.anomaly_cosine is not None or a.rule in ("krum", "multikrum", "bulyan")
        for task in tasks:
            if not task.train:
                continue
            task.upload = ClientUpload(
                settings=self.settings,
                attacking=self.attacking(task.client, round_idx),
                clip_norm=self.clip_norm(),
                residual=self.residuals.get(task.client),
                individual=a.needs_individual,
                need_delta=need_delta,
            )

    def combine(
        self, round_idx: int, worker_sums: list[dict[str, WeightedSum]], results: list[Any]
    ) -> dict[str, WeightedSum]:
        """The sums ``aggregate`` receives: the workers' partial sums merged, or the server
        stages' result (filter, robust rule, central noise)."""
        if not self.active:
            return merge_sums(worker_sums)
        cfg = self.cfg
        trained = [c for c in results if c.train_loss is not None and not c.failed]
        patterns: tuple[str, ...] = ()
        for c in trained:
            upload = self.algorithm.model_upload(self.algorithm.client_info(c.client, round_idx))
            if upload is not None:
                patterns += tuple(p for p in upload.sums if p not in patterns)
        extras: dict[str, Any] = {}
        if cfg.aggregation.needs_individual:
            outcome = robust_sums(
                cfg.aggregation,
                {c.client: c.upload.sums for c in trained},
                {c.client: c.upload.delta for c in trained if c.upload.delta is not None},
                patterns,
            )
            sums = outcome.sums
            if cfg.aggregation.anomaly_cosine is not None:
                extras["anomaly_dropped"] = outcome.dropped
            if outcome.selected is not None:
                extras["robust_selected"] = outcome.selected
        else:
            sums = merge_sums(worker_sums)
        clip = self.clip_norm()
        if cfg.privacy.mode == "central" and clip is not None:
            max_weights: dict[str, float] = {}
            for c in trained:
                for key, weight in c.weights.items():
                    max_weights[key] = max(max_weights.get(key, 0.0), weight)
            std = cfg.privacy.noise_multiplier * clip
            add_central_noise(sums, patterns, max_weights, std, cfg.seed, round_idx)
        if clip is not None:
            extras["clip_norm"] = clip
            norms = [c.upload.norm for c in trained if c.upload and c.upload.norm is not None]
            if norms:
                extras["clipped_fraction"] = sum(n > clip for n in norms) / len(norms)
            if self.adaptive is not None:
                self.adaptive.update_from_norms(norms)
        for c in trained:
            self.participation[c.client] = self.participation.get(c.client, 0) + 1
            if c.upload is not None and c.upload.residual is not None:
                self.residuals[c.client] = c.upload.residual
        if cfg.attack.kind != "none":
            extras["attackers"] = [c.client for c in trained if self.attacking(c.client, round_idx)]
        if cfg.privacy.enabled:
            extras.update(self.privacy_spent(round_idx))
        self._extras = extras
        return sums

    def round_summary(self) -> dict[str, Any]:
        """Keys the last ``combine`` adds to the round's summary (metrics.jsonl)."""
        extras, self._extras = self._extras, {}
        return extras

    def privacy_spent(self, round_idx: int) -> dict[str, Any]:
        """``epsilon`` (None where no guarantee holds) after ``round_idx + 1`` rounds."""
        from fedsim.deployment.accountant import epsilon, local_epsilon, participation_epsilon

        p = self.cfg.privacy
        z = p.noise_multiplier
        if p.mode == "fixed_sigma":
            z = p.sigma / p.clip_norm if p.clip_norm is not None else math.nan
        if math.isnan(z):
            value: float | None = None
        elif p.mode == "central" and self.sampled:
            rate = self.cohort_size / max(self.num_clients, 1)
            value = epsilon(z, rate, round_idx + 1, p.delta)
        elif p.mode == "central":
            value = participation_epsilon(z, max(self.participation.values(), default=0), p.delta)
        else:
            value = local_epsilon(z, max(self.participation.values(), default=0), p.delta)
        if value is not None and not math.isfinite(value):
            value = None
        return {"epsilon": value, "dp_delta": p.delta}

    # --- the run folder ---
    def annotate(self, record: Any) -> None:
        """Mark attackers in the round's client rows (clients.csv's ``attacked`` column)."""
        if self.cfg.attack.kind == "none":
            return
        for row in record.clients:
            row.attacked = row.client in self.attackers

    def partition_info(self, partition: dict[str, Any]) -> dict[str, Any]:
        """partition.json with the attackers (when an attack is configured)."""
        if self.cfg.attack.kind == "none":
            return partition
        out = dict(partition)
        out["attacked_clients"] = sorted(self.attackers)
        clients = partition.get("clients", [])
        out["clients"] = [{**c, "attacked": c.get("client") in self.attackers} for c in clients]
        return out

    # --- checkpoints ---
    def state_dict(self) -> dict[str, Any] | None:
        """What a resumed run needs (None when no option keeps state)."""
        if not self.active:
            return None
        return {
            "residuals": dict(self.residuals),
            "participation": dict(self.participation),
            "clip_norm": None if self.adaptive is None else self.adaptive.value,
            "clip_steps": None if self.adaptive is None else self.adaptive.steps,
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Start afresh (None), or continue from a checkpoint's ``state_dict``."""
        p = self.cfg.privacy
        self.adaptive = None
        if p.adaptive and p.clip_norm is not None:
            self.adaptive = AdaptiveClipNorm(
                p.clip_norm, target_quantile=p.target_quantile, seed=(self.cfg.seed, CLIP_COUNT_TAG)
            )
        self.residuals: dict[int, torch.Tensor] = {}
        self.participation: dict[int, int] = {}
        self._extras: dict[str, Any] = {}
        if not state:
            return
        self.residuals = dict(state.get("residuals") or {})
        self.participation = dict(state.get("participation") or {})
        if self.adaptive is not None and state.get("clip_norm") is not None:
            self.adaptive.value = float(state["clip_norm"])
            self.adaptive.steps = int(state.get("clip_steps") or 0)


def privacy_summary(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """summary.json's ``privacy``: the last round's epsilon and delta (None: privacy off)."""
    spent = [h for h in history if "dp_delta" in h]
    if not spent:
        return None
    return {"epsilon": spent[-1]["epsilon"], "delta": spent[-1]["dp_delta"]}
