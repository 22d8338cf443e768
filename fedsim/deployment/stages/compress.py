"""The compression stage (``compression.*``): clients send sparse updates.

Client side: the delta (plus the client's residual, with error feedback) encoded as indices
and values; what was not sent is the next residual. Server side: the residuals kept per
client, which a checkpoint holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedsim.config import CompressionConfig
from fedsim.deployment.compression import make_encoder
from fedsim.deployment.stages.base import ClientStep, ServerAggregation, StepContext, UploadStage


@dataclass(frozen=True)
class Compress(ClientStep):
    kind: str
    threshold: float
    fraction: float
    error_feedback: bool = False
    residual: torch.Tensor | None = None  # what this client did not send before

    def apply(self, delta: torch.Tensor, context: StepContext) -> torch.Tensor:
        encode = make_encoder(self.kind, threshold=self.threshold, fraction=self.fraction)
        if encode is None:
            return delta
        feedback = self.error_feedback and self.residual is not None
        corrected = delta + self.residual if feedback else delta
        sparse = encode(corrected)
        sent = sparse.to_dense()
        if self.error_feedback:
            context.report.residual = corrected - sent
        context.report.sparse_nbytes = sparse.nbytes
        context.sparse = sparse
        return sent


class CompressStage(UploadStage):
    def __init__(self, config: CompressionConfig):
        self.config = config
        self.residuals: dict[int, torch.Tensor] = {}

    def client_step(self, client: int, round_idx: int) -> ClientStep:
        c = self.config
        return Compress(
            c.kind, c.threshold, c.fraction, c.error_feedback, self.residuals.get(client)
        )

    def server(self, aggregation: ServerAggregation) -> None:
        for c in aggregation.trained:
            if c.upload is not None and c.upload.residual is not None:
                self.residuals[c.client] = c.upload.residual

    def state_dict(self) -> dict[str, Any]:
        return {"residuals": dict(self.residuals)}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        self.residuals = dict((state or {}).get("residuals") or {})
