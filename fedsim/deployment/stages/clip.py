"""The clipping stage (``privacy.clip_norm``, ``privacy.adaptive``).

Client side: the delta scaled to norm at most C (its norm before, in the report). Server
side: ``clip_norm`` and ``clipped_fraction`` in the summary; with ``privacy.adaptive`` the
next C from this round's norms (Andrew et al., 2021), which a checkpoint keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedsim.config import PrivacyConfig
from fedsim.deployment.privacy import AdaptiveClipNorm, clip_to_norm
from fedsim.deployment.stages.base import ClientStep, ServerAggregation, StepContext, UploadStage
from fedsim.streams import CLIP_COUNT_TAG


@dataclass(frozen=True)
class ClipDelta(ClientStep):
    norm: float

    def apply(self, delta: torch.Tensor, context: StepContext) -> torch.Tensor:
        delta, context.report.norm = clip_to_norm(delta, self.norm)
        return delta


class ClipStage(UploadStage):
    def __init__(self, config: PrivacyConfig, seed: int):
        assert config.clip_norm is not None
        self.config, self.seed = config, seed
        self.load_state_dict(None)

    @property
    def value(self) -> float:
        """This round's clip norm C (adaptive: its current value)."""
        return self.adaptive.value if self.adaptive is not None else self.config.clip_norm

    def client_step(self, client: int, round_idx: int) -> ClientStep:
        return ClipDelta(self.value)

    def server(self, aggregation: ServerAggregation) -> None:
        clip = self.value
        aggregation.metrics["clip_norm"] = clip
        norms = [
            c.upload.norm for c in aggregation.trained if c.upload and c.upload.norm is not None
        ]
        if norms:
            aggregation.metrics["clipped_fraction"] = sum(n > clip for n in norms) / len(norms)
        if self.adaptive is not None:
            self.adaptive.update_from_norms(norms)

    def state_dict(self) -> dict[str, Any]:
        adaptive = self.adaptive
        return {
            "clip_norm": None if adaptive is None else adaptive.value,
            "clip_steps": None if adaptive is None else adaptive.steps,
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        c = self.config
        self.adaptive = None
        if c.adaptive:
            self.adaptive = AdaptiveClipNorm(
                c.clip_norm, target_quantile=c.target_quantile, seed=(self.seed, CLIP_COUNT_TAG)
            )
            if state and state.get("clip_norm") is not None:
                self.adaptive.value = float(state["clip_norm"])
                self.adaptive.steps = int(state.get("clip_steps") or 0)
