"""FedDPA: a global LoRA adapter, averaged; a personal one beside it, kept by each client; the
two mixed per test instance by its similarity to the client's own training instances.

Yang et al., "Dual-Personalizing Adapter for Federated Foundation Models", NeurIPS 2024;
official code github.com/Lydia-yang/FedDPA (``main.py --local_model True``, FedDPA-T;
``GlobalModel_generated.py --auto True`` for inference). Rules: docs/algorithms.md, "feddpa".

The model is an adapted one (``causal_lm``, ``sequence_classifier``) built with the
``personal`` adapter variant this algorithm declares (``lightning_modules/dual_adapter.py``),
and declares which entries are which (``FederationInfo.adapters``): its flat vector holds the
global adapter (peft's ``default``), the personal adapter and the combination's entries
``dual.mix`` = (g, p, w) and ``dual.reference`` = m, which this algorithm writes into every model it
hands the worker. Each round a sampled client
1. trains the received global adapter alone (g, p, w = 1, 0, 0; the personal adapter frozen),
   the worker's main pass, and uploads it: the server averages the uploads uniformly (the
   official code) or with weights n_i (``weighting: samples``, FedAvg's);
2. from round 1 on, trains its personal adapter for ``personal_epochs`` with the received
   global adapter frozen beside it, (g, p) = (1 - a, a): the official code's local pass
   (there the global branch's output is detached; here its weights are frozen), from the
   initial personal adapter if it skipped the previous round (``reset_after_skip``), then
3. embeds ``reference_samples`` of its training instances with the personal adapter alone and
   keeps m, the mean of their unit embeddings, with the personal adapter (its state).
A client is evaluated with (g, p, w) = (0, 1, max_weight) and its m: instance x gets the
global adapter at w cos(x) and the personal one at 1 - w cos(x), cos(x) the mean cosine
similarity between x and those instances (``dynamic: false``: fixed w and 1 - w). An
instance's embedding is taken at the end of its first ``prompt_fraction`` of tokens (the
official code embeds the prompt only; 1.0: the whole window). A client without a personal
adapter yet is evaluated with the global adapter alone.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedsim.algorithm_params.feddpa import FedDPAParams
from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientProbe,
    ClientState,
    ClientUpdate,
    FederationInfo,
    NewcomerRule,
)
from fedsim.algorithms.lora_parts import require_lora
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import SharedPart
from fedsim.errors import ConfigError
from fedsim.sizes import nbytes
from fedsim.streams import NEWCOMER_FINETUNE_KEY
from lightning_modules.dual_adapter import DualAdapter
from lightning_modules.flat_params import flat_ranges, gather, scatter
from lightning_modules.hooks import ClientTerms

PERSONAL_KEY = 41  # probe keys (fedsim.streams): the personal pass, the reference draw
REFERENCE_KEY = 43
GLOBAL_ALONE = (1.0, 0.0, 0.0)
UNIFORM = 1.0  # a client's weight in the uniform average


class _Embeddings(ClientTerms):
    """Collects the unit embeddings of the batches it is shown and trains nothing: its
    objective is 0 x the (never used in training) reference entry."""

    def __init__(self) -> None:
        self.units: list[torch.Tensor] = []

    def objective(self, module: torch.nn.Module, batch: Any) -> torch.Tensor:
        dual = next(m for m in module.modules() if isinstance(m, DualAdapter))
        was_training = module.training
        module.eval()
        with torch.no_grad():
            self.units.append(dual.embed(batch[0]).cpu())
        module.train(was_training)
        return dual.reference.sum() * 0.0


@register
class FedDPA(SharedPart):
    """Global adapter averaged (FedAvg); personal adapter kept; mixed per instance to test."""

    name = "feddpa"
    Params = FedDPAParams
    newcomer = NewcomerRule(
        rule="the global adapter alone; with eval.finetune_epochs E > 0, a personal adapter "
        "trained E epochs beside it (the personal pass, from the initial personal adapter) and "
        "mixed with it per instance, as a member is",
        source="fedsim's choice: the paper serves only members; a newcomer has no personal "
        "adapter, and E > 0 gives it the one a member's first personal pass would",
        adapts=True,
    )

    def __init__(self, params: FedDPAParams, federation: FederationInfo):
        layout = federation.layout
        names = [e.name for e in layout.entries]
        modules = require_lora(federation, "feddpa")
        parts = federation.adapters
        if parts.mix is None or parts.reference is None or any(
                m.personal_a is None or m.personal_b is None for m in modules):  # fmt: skip
            raise ConfigError(
                "model.name", parts.variant, "FedDPA needs a personal adapter beside the "
                "global one, and the model declares none: build it with the personal adapter "
                "variant (causal_lm and sequence_classifier do, as this algorithm asks)",
            )  # fmt: skip
        self.global_names = [n for m in modules for n in (m.a, m.b)]
        super().__init__(params, federation)
        personal = [n for m in modules for n in (m.personal_a, m.personal_b)]
        self.adapter_ranges = flat_ranges(layout, personal)
        # (start, stop), not slices: a checkpoint holds plain values only
        self.mix_at = flat_ranges(layout, [parts.mix])[0]
        self.reference_at = flat_ranges(layout, [parts.reference])[0]
        control = [parts.mix, parts.reference]
        self.frozen_global_pass = personal + control  # the main pass trains the global adapter
        self.frozen_personal_pass = self.global_names + control
        self.all_but_reference = [n for n in names if n != parts.reference]

    def shared_names(self) -> list[str]:
        return self.global_names

    # --- models: the vector with its personal adapter and combination written in ---
    def compose(
        self,
        params: torch.Tensor,
        mix: tuple[float, float, float],
        state: ClientState | None = None,
    ) -> torch.Tensor:
        """``params`` (a new tensor) with ``state``'s personal adapter and reference (None:
        ``params``' own, m = 0), the scales ``mix`` = (g, p, w) and ``prompt_fraction``."""
        model = params.clone()
        if state is not None:
            scatter(model, self.adapter_ranges, state["personal"])
            model[slice(*self.reference_at)] = state["reference"]
        else:
            model[slice(*self.reference_at)] = 0.0
        model[slice(*self.mix_at)] = torch.tensor((*mix, self.params.prompt_fraction),
                                                  dtype=model.dtype)  # fmt: skip
        return model

    def inference_mix(self) -> tuple[float, float, float]:
        """(g, p, w) a client tests with: dynamic (0, 1, w) or fixed (w, 1 - w, 0)."""
        w = self.params.max_weight
        return (0.0, 1.0, w) if self.params.dynamic else (w, 1.0 - w, 0.0)

    def global_params(self, broadcast: dict[str, Any]) -> torch.Tensor:
        """The global adapter alone."""
        return self.compose(broadcast["params"], GLOBAL_ALONE)

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """Test the mix of the global and own personal adapter; train the global one alone."""
        train = self.global_params(broadcast)
        plan = ClientPlan(train_params=train, frozen=self.frozen_global_pass)
        if state is not None:
            plan.eval_params = self.compose(train, self.inference_mix(), state)
        return plan

    # --- worker side: the personal pass and its reference ---
    def personal_pass(
        self,
        probe: ClientProbe,
        received: torch.Tensor,
        state: ClientState | None,
        epochs: int,
        key: int,
        label: str | None = None,
    ) -> ClientState | None:
        """The personal adapter trained ``epochs`` beside the frozen global one of ``received``,
        at scales (1 - a, a), and its reference m; None if the pass diverged."""
        a = self.params.local_weight
        start = self.compose(received, (1.0 - a, a, 0.0), state)
        tuned, loss = probe.train(
            start, epochs=epochs, frozen=self.frozen_personal_pass, key=key, label=label
        )
        if not math.isfinite(loss):
            return None
        personal = gather(tuned, self.adapter_ranges)
        return {"personal": personal, "reference": self.reference(probe, tuned)}

    def kept_state(self, state: ClientState | None, client: ClientInfo) -> ClientState | None:
        """The state a personal pass starts from: None (the initial personal adapter) for a
        client that skipped the previous round, with ``reset_after_skip``."""
        if state is None or not self.params.reset_after_skip:
            return state
        last = state.get("round")
        return None if last is not None and client.round - int(last) > 1 else state

    def reference(self, probe: ClientProbe, model: torch.Tensor) -> torch.Tensor:
        """m: the mean unit embedding of ``reference_samples`` training instances (a seeded
        draw) under ``model``'s personal adapter alone."""
        order = np.concatenate(probe.batches(1, key=REFERENCE_KEY))
        chosen = np.sort(order[: self.params.reference_samples])
        collector = _Embeddings()
        probe.train(model, terms=collector, frozen=self.all_but_reference, indices=chosen,
                    key=REFERENCE_KEY)  # fmt: skip
        return torch.cat(collector.units).mean(0)

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        """Upload the trained global adapter (weight 1, or n_i); from round 1, the personal
        pass (its state records the round, for ``reset_after_skip``)."""
        sums = self.shared_sums(trained, plan, client)
        if self.params.weighting == "uniform":
            sums = {key: (UNIFORM, value) for key, (_, value) in sums.items()}
        update = ClientUpdate(sums=sums)
        if client.round < 1:  # the official code trains no local adapter in round 0
            return update
        if client.probe is None:
            raise RuntimeError("FedDPA trains the personal adapter through the worker's probe")
        update.state = self.personal_pass(
            client.probe, plan.train_params, self.kept_state(state, client),
            self.params.personal_epochs, PERSONAL_KEY, label="personal",
        )  # fmt: skip
        if update.state is not None:
            update.state["round"] = client.round
        return update

    def kept_params(
        self, plan: ClientPlan, trained: torch.Tensor, update: ClientUpdate, client: ClientInfo
    ) -> torch.Tensor:
        """The trained global adapter mixed with the new personal one (none yet: alone)."""
        if update.state is None:
            return trained
        return self.compose(trained, self.inference_mix(), update.state)

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The global adapter alone, or mixed with a personal one trained ``finetune_epochs``."""
        alone = self.global_params(broadcast)
        if finetune_epochs < 1:
            return alone
        if client.probe is None:
            raise RuntimeError("FedDPA adapts a newcomer through the worker's probe")
        state = self.personal_pass(client.probe, alone, None, finetune_epochs,
                                   NEWCOMER_FINETUNE_KEY)  # fmt: skip
        return alone if state is None else self.compose(alone, self.inference_mix(), state)

    # --- bytes: only the global adapter travels, both ways ---
    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """The global adapter (the personal one and the combination never leave the client)."""
        params = broadcast["params"]
        shared = sum(b - a for a, b in self.shared_ranges) * params.element_size()
        return shared + nbytes(payload)
