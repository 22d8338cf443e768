"""FedAvg-FT: FedAvg, with each client's evaluation on the global model fine-tuned locally.

The personalization baseline of the pFL benchmarks (pFL-Bench's and Motley's "FedAvg-FT";
Wang et al. 2019, "Federated Evaluation of On-device Personalization"): training and the
server are FedAvg's, unchanged (its aggregation weights and server optimizer keys too). A
client that is evaluated fine-tunes the received global model for ``finetune_epochs`` epochs
of its own local training (the run's optimizer, batch size and lr) on its train split,
through the probe (seeded apart from its training), and is tested on that model; the
fine-tuned model is not kept and not sent. ``finetune_epochs: 0`` is FedAvg. Evaluated after
its round's training (``eval.when=after_training``), a client fine-tunes the model it trained.

A held-out client is evaluated the same way, fine-tuning for ``eval.finetune_epochs`` epochs.
"""

from __future__ import annotations

from typing import Any, ClassVar

from fedsim.algorithm_params.fedavg_ft import FedAvgFTParams
from fedsim.algorithms.base import ClientInfo, ClientPlan, ClientState, NewcomerRule
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import FineTunedBeforeTest


@register
class FedAvgFT(FineTunedBeforeTest, FedAvg):
    """FedAvg; an evaluated client fine-tunes the global model first (not kept)."""

    name = "fedavg_ft"
    Params = FedAvgFTParams
    newcomer: ClassVar[NewcomerRule] = NewcomerRule(
        rule="the global model fine-tuned for eval.finetune_epochs epochs on its own train "
        "split (FedAvg-FT's evaluation)",
        source="the method's: Wang et al. 2019 personalize the federation's model by local "
        "fine-tuning on each device before it is evaluated",
        adapts=True,
    )

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """FedAvg's training; an evaluated client is tested on the fine-tuned model."""
        plan = super().client_start(broadcast, payload, state, client)
        if client.evaluates:
            tuned = self.fine_tuned(plan.train_params, client)
            if tuned is not plan.train_params:
                plan.eval_params = tuned
        return plan
