"""FedDPA's rules by hand on a hand-made adapter (no model): the server's weights (uniform,
the official code, or n_i), the personal pass (its start, what it freezes, its reference, the
state it keeps) and the reset of a client that skipped the previous round. The model's side
(the per-instance mix, the prompt prefix) runs on the tiny Llama in ``test_feddpa.py``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from helpers import client_info, federation, run_round

from fedsim.algorithm_params.feddpa import FedDPAParams
from fedsim.algorithms.feddpa import FedDPA
from fedsim.errors import ConfigError
from lightning_modules.adapters import AdapterParts, LoraModule

MIX, REFERENCE = "dual.mix", "dual.reference"
HIDDEN = 2


def dual_federation(sizes: tuple[int, ...] = (1, 3)) -> Any:
    """One adapted module m: global A (2 x 3), B (4 x 2), personal A and B beside them, the
    mix (g, p, w, f) and the reference m (HIDDEN), as the personal variant declares them."""
    names = {k: f"m.lora_{k[-1].upper()}.{'personal' if k[0] == 'p' else 'default'}.weight"
             for k in ("ga", "gb", "pa", "pb")}  # fmt: skip
    params = [(names["ga"], (2, 3)), (names["pa"], (2, 3)), (names["gb"], (4, 2)),
              (names["pb"], (4, 2)), (MIX, (4,)), (REFERENCE, (HIDDEN,))]  # fmt: skip
    module = LoraModule("m", names["ga"], names["gb"], None, names["pa"], names["pb"])
    declared = AdapterParts("personal", (module,), MIX, REFERENCE)
    return federation(params, sizes=list(sizes), adapters=declared), names


class PassProbe:
    """A worker probe that 'trains' by adding 1 to every entry not frozen and embeds each
    instance as the unit vector ``unit``; it records what it was asked."""

    def __init__(self, unit: torch.Tensor):
        self.unit, self.calls = unit, []

    def batches(self, epochs: int, key: int) -> list[np.ndarray]:
        return [np.arange(8)]

    def train(self, start, epochs=1, frozen=(), key=0, label=None, terms=None, indices=None):
        self.calls.append({"start": start.clone(), "epochs": epochs, "frozen": list(frozen),
                           "indices": indices})  # fmt: skip
        if terms is not None:  # the reference's pass: embeddings, nothing trained
            terms.units.append(self.unit.expand(len(indices), -1).clone())
            return start.clone(), 0.0
        layout, tuned = self.layout, start.clone()
        for e in layout.entries:
            if e.name not in frozen:
                tuned[layout.slice_of(e.name)] += 1.0
        return tuned, 0.25


@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_the_global_adapters_are_averaged_uniformly_or_by_samples(weighting):
    """Official: the mean of the uploads (its n-weighted line is commented out); samples:
    sum n_i G_i / sum n_i. Only the global adapter is averaged."""
    fed, names = dual_federation(sizes=(1, 3))
    algo = FedDPA(FedDPAParams(weighting=weighting), fed)
    initial = torch.randn(fed.layout.total, generator=torch.Generator().manual_seed(0))
    state = algo.init_state(initial)
    models = [torch.randn(fed.layout.total, generator=torch.Generator().manual_seed(s))
              for s in (1, 2)]  # fmt: skip
    new, _ = run_round(algo, state, models)  # round 0: no personal pass
    weights = (1.0, 1.0) if weighting == "uniform" else (1.0, 3.0)
    for key in ("ga", "gb"):
        views = [fed.layout.view(m, names[key]).double() for m in models]
        want = (weights[0] * views[0] + weights[1] * views[1]) / sum(weights)
        assert torch.equal(fed.layout.view(new["params"], names[key]), want.float()), key
    for key in ("pa", "pb"):  # the personal adapter never leaves the client
        assert torch.equal(fed.layout.view(new["params"], names[key]),
                           fed.layout.view(initial, names[key]))  # fmt: skip


def test_the_personal_pass_by_hand():
    """Round >= 1: from the received global adapter and the client's own personal adapter at
    scales (1 - a, a), the global adapter and the mix frozen, ``personal_epochs`` epochs; the
    kept state is the tuned personal adapter, m = the mean unit embedding of
    ``reference_samples`` instances, and the round."""
    fed, names = dual_federation()
    params = FedDPAParams(local_weight=0.25, personal_epochs=2, reference_samples=3,
                          prompt_fraction=0.5)  # fmt: skip
    algo = FedDPA(params, fed)
    layout = fed.layout
    probe = PassProbe(torch.tensor([0.6, 0.8]))
    probe.layout = layout
    received = torch.zeros(layout.total)
    own = {"personal": torch.full((14,), 2.0), "reference": torch.ones(HIDDEN), "round": 1}
    info = client_info(fed, 0, round_idx=2, probe=probe)
    plan = algo.client_start({"params": received}, {}, own, info)
    update = algo.client_finish(plan, received + 0.5, own, info)
    first = probe.calls[0]
    assert first["epochs"] == 2
    assert sorted(first["frozen"]) == sorted([names["ga"], names["gb"], MIX, REFERENCE])
    assert layout.view(first["start"], MIX).tolist() == [0.75, 0.25, 0.0, 0.5]
    assert torch.equal(layout.view(first["start"], names["pa"]), torch.full((2, 3), 2.0))
    kept = update.state
    assert torch.equal(kept["personal"], torch.full((14,), 3.0))  # its own + one 'step'
    assert torch.allclose(kept["reference"], torch.tensor([0.6, 0.8]))
    assert len(probe.calls[1]["indices"]) == 3 and kept["round"] == 2
    # evaluated next time with (0, 1, w, f) and that state
    again = algo.client_start({"params": received}, {}, kept, client_info(fed, 0, 3))
    assert layout.view(again.eval_params, MIX).tolist() == [0.0, 1.0, 0.5, 0.5]
    assert torch.equal(layout.view(again.eval_params, REFERENCE), kept["reference"])


@pytest.mark.parametrize("reset", [True, False])
def test_a_client_that_skipped_a_round_restarts_its_personal_adapter(reset):
    """Official: a client not sampled in the previous round starts its personal pass from
    the initial personal adapter (the server's, which never changes); false: from its own."""
    fed, names = dual_federation()
    algo = FedDPA(FedDPAParams(reset_after_skip=reset), fed)
    probe = PassProbe(torch.tensor([1.0, 0.0]))
    probe.layout = fed.layout
    received = torch.zeros(fed.layout.total)
    received[fed.layout.slice_of(names["pa"])] = -1.0  # the initial personal A
    own = {"personal": torch.full((14,), 2.0), "reference": torch.ones(HIDDEN), "round": 1}
    for round_idx, skipped in ((2, False), (3, True)):
        probe.calls.clear()
        info = client_info(fed, 0, round_idx=round_idx, probe=probe)
        algo.client_finish(algo.client_start({"params": received}, {}, own, info),
                           received, own, info)  # fmt: skip
        start = fed.layout.view(probe.calls[0]["start"], names["pa"])
        fresh = reset and skipped
        assert torch.equal(start, torch.full((2, 3), -1.0 if fresh else 2.0)), round_idx


def test_bad_options_are_refused_naming_the_key():
    from fedsim.config import load_config

    for key, value in (("weighting", "n"), ("prompt_fraction", 0.0)):
        with pytest.raises(ConfigError) as err:
            load_config(None, ["algorithm.name=feddpa", f"algorithm.{key}={value}"])
        assert err.value.key == f"algorithm.{key}" and "\n" not in str(err.value)
