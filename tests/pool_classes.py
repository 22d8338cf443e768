"""Test classes that Ray runs on the session's lent worker actors use (conftest ``ray_pool``
ships this module with them, so a run naming one keeps the actors instead of starting new
ones with it)."""

from __future__ import annotations

from fedsim.algorithms.fedavg import FedAvg


class FedAvgWithMemory(FedAvg):
    """FedAvg whose clients also keep their last model and a count: state that must survive."""

    def client_finish(self, plan, trained, state, client):
        update = super().client_finish(plan, trained, state, client)
        update.state = {"params": trained, "rounds": (state or {}).get("rounds", 0) + 1}
        return update
