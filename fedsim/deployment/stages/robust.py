"""The robust-aggregation stage (``aggregation.rule``, ``aggregation.anomaly_cosine``).

Server side only: the anomaly filter, then the robust rule instead of the weighted mean,
on each client's own sums (``fedsim/deployment/server_stages.py``). It asks the clients
for their sums on their own, and for their flat updates where the filter or a selection
rule (krum, multikrum, bulyan) compares them.
"""

from __future__ import annotations

from fedsim.config import AggregationConfig
from fedsim.deployment.server_stages import robust_sums
from fedsim.deployment.stages.base import ServerAggregation, UploadStage

SELECTION_RULES = ("krum", "multikrum", "bulyan")


class RobustStage(UploadStage):
    needs_individual = True

    def __init__(self, config: AggregationConfig):
        self.config = config
        self.needs_delta = config.anomaly_cosine is not None or config.rule in SELECTION_RULES

    def server(self, aggregation: ServerAggregation) -> None:
        trained = aggregation.trained
        outcome = robust_sums(
            self.config,
            aggregation.individual,
            {c.client: c.upload.delta for c in trained if c.upload.delta is not None},
            aggregation.patterns,
        )
        aggregation.sums = outcome.sums
        if self.config.anomaly_cosine is not None:
            aggregation.metrics["anomaly_dropped"] = outcome.dropped
        if outcome.selected is not None:
            aggregation.metrics["robust_selected"] = outcome.selected
