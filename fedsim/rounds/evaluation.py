"""What ``eval.*`` asks of the algorithm and the round kind, checked when the run is built.

Held-out clients need a newcomer rule the algorithm can follow (and a train split where the
rule adapts on one); ``eval.model=global|both`` needs a global model; ``eval.when=
after_training`` needs a client's evaluation and its training in one task (local rounds).
Each refusal is one line naming the key, its value and why.
"""

from __future__ import annotations

from fedsim.algorithms.base import Algorithm
from fedsim.config import ExperimentConfig
from fedsim.data.federated import FederatedData
from fedsim.errors import ConfigError


def check_evaluation(
    cfg: ExperimentConfig, algorithm: Algorithm, kind: str, data: FederatedData
) -> None:
    """ConfigError for an ``eval`` key this algorithm or round kind cannot honour."""
    e, name = cfg.eval, cfg.algorithm.name
    rule = algorithm.newcomer
    if data.newcomers and rule.refused:
        raise ConfigError(
            "eval.holdout_clients",
            e.holdout_clients,
            f"algorithm.name={name} cannot serve a client that never trained: {rule.refused}",
        )
    if data.newcomers and rule.adapts:
        members = data.num_clients
        bare = [members + k for k, c in enumerate(data.newcomers) if len(c.train) == 0]
        if bare:
            raise ConfigError(
                "eval.holdout_clients",
                e.holdout_clients,
                f"held-out client {bare[0]} has no train split, and algorithm.name={name} "
                "serves a newcomer from its own training data (docs/algorithms.md); use a "
                "partition that gives every client training samples",
            )
    if e.model != "personal" and not algorithm.has_global_model:
        raise ConfigError(
            "eval.model",
            e.model,
            f"algorithm.name={name} has no global model that every client could use "
            "(docs/algorithms.md); use eval.model=personal",
        )
    if e.when == "after_training" and kind != "local":
        why = {
            "buffered": "with asynchronous.enabled=true a model version is evaluated apart "
            "from the clients that train on it",
            "exchange": f"algorithm.name={name} trains by gradient exchanges, not one local "
            "training per client",
        }[kind]
        raise ConfigError("eval.when", e.when, f"{why}; use eval.when=start")
