"""FedPer through the seam: hand-computed base averages, what leaves a client, options."""

from __future__ import annotations

import math
import pickle
import struct

import numpy as np
import pytest
import torch
from helpers import client_info, federation, module_federation, run_round
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.algorithms.fedper import FedPer, FedPerParams
from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.storage import ClientStateStore
from lightning_modules.flat_params import ParamLayout

SIZES = [10, 30, 60]
# three blocks of two entries each, bottom -> top: flat = [a0 a1 | b0 b1 | c0 c1]
BLOCKS = {"a": ["a.w"], "b": ["b.w"], "c": ["c.w"]}


PARAMS = [("a.w", (2,)), ("b.w", (2,)), ("c.w", (2,))]
FED = federation(PARAMS, SIZES, blocks=BLOCKS)  # for client infos: client c holds SIZES[c]
WORKERS = ((0, 2), (1,))  # the clients of each of two workers


def make(**params) -> FedPer:
    return FedPer(FedPerParams(**params), federation(PARAMS, SIZES, blocks=BLOCKS))


MODELS = {
    0: torch.tensor([1.0, 2, 3, 4, 5, 6]),
    1: torch.tensor([0.0, 0, 8, 0, 7, 7]),
    2: torch.tensor([2.0, 1, 0, 1, 9, 9]),
}


def test_base_is_the_sample_weighted_mean_and_head_stays_on_the_server_value():
    algo = make(personal_layers=1)
    state = algo.init_state(torch.zeros(6))
    new, updates = run_round(algo, state, MODELS, workers=WORKERS)
    # hand: base (a, b) = (10 m0 + 30 m1 + 60 m2) / 100 over the first 4 entries
    base = [(10 + 120) / 100, (20 + 60) / 100, (30 + 240) / 100, (40 + 60) / 100]
    assert torch.allclose(new["params"], torch.tensor([*base, 0.0, 0.0]), atol=1e-7)
    assert torch.equal(updates[1].state["personal"], torch.tensor([7.0, 7.0]))


def test_sqrt_weighting_matches_hand_computation():
    algo = make(personal_layers=2, weighting="sqrt")
    state = algo.init_state(torch.zeros(6))
    new, _ = run_round(algo, state, MODELS, workers=WORKERS)
    s = [math.sqrt(n) for n in SIZES]
    expected_a0 = (s[0] * 1 + s[1] * 0 + s[2] * 2) / sum(s)
    expected_a1 = (s[0] * 2 + s[1] * 0 + s[2] * 1) / sum(s)
    assert new["params"][0].item() == pytest.approx(expected_a0, abs=1e-6)
    assert new["params"][1].item() == pytest.approx(expected_a1, abs=1e-6)
    assert torch.equal(new["params"][2:], torch.zeros(4))  # b and c personal for everyone


def test_per_client_k_averages_each_entry_over_the_clients_whose_base_holds_it():
    # client 0: K=1 (base a, b); client 1: K=2 (base a); client 2: K=0 (everything is base)
    algo = make(personal_layers=1, client_personal_layers={1: 2, 2: 0})
    state = algo.init_state(torch.zeros(6))
    new, updates = run_round(algo, state, MODELS, workers=WORKERS)
    expected = torch.tensor(
        [
            (10 * 1 + 30 * 0 + 60 * 2) / 100,  # a: everyone
            (10 * 2 + 30 * 0 + 60 * 1) / 100,
            (10 * 3 + 60 * 0) / 70,  # b: clients 0 and 2
            (10 * 4 + 60 * 1) / 70,
            9.0,  # c: only client 2
            9.0,
        ]
    )
    assert torch.allclose(new["params"], expected, atol=1e-6)
    assert updates[1].state["personal"].numel() == 4 and updates[2].state["personal"].numel() == 0


def test_tiers_give_each_client_its_k():
    algo = make(client_tiers={0: "low", 1: "high"}, tier_personal_layers={"low": 1, "high": 3})
    assert algo.client_k == [1, 3, 1]


def test_personal_layers_never_leave_the_client():
    """The bytes a client sends hold no personal entry; its state holds exactly them."""
    algo = make(personal_layers=1)
    state = algo.init_state(torch.zeros(6))
    sentinel = [123456.75, -98765.25]
    trained = torch.tensor([0.5, 1.5, 2.5, 3.5, *sentinel])
    plan = algo.client_start(algo.broadcast(state), {}, None, client_info(FED, 0))
    update = algo.client_finish(plan, trained, None, client_info(FED, 0))
    assert update.individual is None
    uploaded = [value for _, value in update.sums.values()]
    assert [v.numel() for v in uploaded] == [4]
    assert torch.equal(uploaded[0], trained[:4])
    wire = pickle.dumps((update.sums, update.individual))
    for value in sentinel:
        assert struct.pack("<f", value) not in wire
        assert struct.pack("<d", value) not in wire
    assert torch.equal(update.state["personal"], torch.tensor(sentinel))
    # and the upload is a copy: changing it cannot reach the client's state
    uploaded[0].zero_()
    assert torch.equal(update.state["personal"], torch.tensor(sentinel))


def test_server_never_overwrites_personal_layers_even_after_many_unsampled_rounds():
    """Client 0 trains once, sits out 30 rounds (its state spilled to disk), then resumes."""
    algo = make(personal_layers=1)
    state = algo.init_state(torch.zeros(6))
    with ClientStateStore(memory_budget_bytes=0) as store:  # every state goes to disk
        state, updates = run_round(algo, state, MODELS)
        for c, update in updates.items():
            store.put(c, update.state)
        for r in range(1, 31):  # clients 1 and 2 only, with new models every round
            models = {c: MODELS[c] + r for c in (1, 2)}
            states = {c: store.get(c) for c in (1, 2)}
            state, updates = run_round(
                algo, state, models, round_idx=r, states=states, workers=((1, 2),)
            )
            for c, update in updates.items():
                store.put(c, update.state)
        assert store.num_spilled == 3
        plan = algo.client_start(algo.broadcast(state), {}, store.get(0), client_info(FED, 0, 31))
    assert torch.equal(plan.train_params[4:], MODELS[0][4:])  # its own head, untouched
    assert torch.equal(plan.train_params[:4], state["params"][:4])  # the newest base
    assert not torch.equal(state["params"][:4], MODELS[0][:4])


def test_cold_start_rounds_are_full_model_fedavg_then_the_split():
    algo = make(personal_layers=1, cold_start_rounds=2)
    state = algo.init_state(torch.zeros(6))
    new, updates = run_round(algo, state, MODELS, round_idx=1, workers=WORKERS)
    expected = sum(n * MODELS[c] for c, n in enumerate(SIZES)) / 100
    assert torch.allclose(new["params"], expected, atol=1e-6)  # head averaged too
    assert all(u.state is None for u in updates.values())
    # round 2: clients start their personal layers from the cold-start model
    plan = algo.client_start(algo.broadcast(new), {}, None, client_info(FED, 0, 2))
    assert torch.equal(plan.train_params, new["params"])
    update = algo.client_finish(plan, MODELS[0], None, client_info(FED, 0, 2))
    assert set(update.sums) == {"base_k1"} and update.sums["base_k1"][1].numel() == 4


class RecordingProbe:
    """Stands in for the worker's probe: 'training' adds 1 to every trainable entry."""

    def __init__(self, layout: ParamLayout):
        self.layout, self.calls = layout, []

    def train(self, params, *, epochs=1, terms=None, frozen=None, indices=None, key=0, label=None):
        self.calls.append({"epochs": epochs, "frozen": list(frozen or [])})
        out = params.clone()
        out[~self.layout.mask(list(frozen or []))] += epochs
        return out, 0.5


def test_finetune_trains_personal_layers_on_the_new_base_with_the_base_frozen():
    algo = make(personal_layers=1, finetune_epochs=3)
    state = algo.init_state(torch.arange(6.0))
    probe = RecordingProbe(algo.federation.layout)
    own = {"personal": torch.tensor([10.0, 20.0])}
    plan = algo.client_start(algo.broadcast(state), {}, own, client_info(FED, 0, probe=probe))
    assert probe.calls == [{"epochs": 3, "frozen": ["a.w", "b.w"]}]
    assert torch.equal(plan.train_params, torch.tensor([0.0, 1, 2, 3, 13, 23]))
    assert plan.eval_params is None  # evaluated with the fine-tuned model


def test_config_errors_name_the_key():
    cases = [
        ("algorithm.weighting=mean", "algorithm.weighting"),
        ("algorithm.personal_layers=-1", "algorithm.personal_layers"),
        ("algorithm.client_tiers={0: huge}", "algorithm.client_tiers.0"),
        ("algorithm.client_personal_layers={0: -2}", "algorithm.client_personal_layers.0"),
    ]
    for override, key in cases:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config("configs/quickstart.yaml", ["algorithm.name=fedper", override])
    with pytest.raises(ConfigError, match="3 blocks"):
        make(personal_layers=4)
    with pytest.raises(ConfigError, match=r"client ids are 0\.\.2"):
        make(client_personal_layers={7: 1})


def test_every_shipped_fedper_and_personalization_config_validates():
    from pathlib import Path

    paths = sorted(Path("configs/fedper").glob("*.yaml"))
    paths += sorted(Path("configs/personalization").glob("*.yaml"))
    assert len(paths) >= 40
    for path in paths:
        cfg = load_config(path)
        assert cfg.name == path.stem and cfg.data.num_clients == 20
    tiers = load_config("configs/fedper/fmnist-pat-fedper-tiers.yaml").algorithm.params
    from lightning_modules.cnn import FedAvgCNN

    algo = FedPer(tiers, module_federation(FedAvgCNN(), np.ones((20, 10), dtype=np.int64)))
    assert algo.client_k[:6] == [3] * 6 and algo.client_k[6:13] == [2] * 7
    assert algo.client_k[13:] == [1] * 7


@settings(max_examples=40, deadline=None)
@given(
    models=st.lists(
        st.lists(st.floats(-100, 100, width=32), min_size=6, max_size=6), min_size=3, max_size=3
    ),
    split=st.integers(0, 3),
    k=st.integers(0, 3),
)
def test_law_base_is_fedavg_of_the_base_entries_whatever_the_worker_split(models, split, k):
    """K=0 is FedAvg; for any K the base is FedAvg restricted to the base, personal unchanged."""
    from fedsim.algorithms.fedavg import FedAvg

    tensors = {c: torch.tensor(m) for c, m in enumerate(models)}
    workers = ((0, 1, 2)[:split], (0, 1, 2)[split:])
    fedper, fedavg = (
        make(personal_layers=k),
        FedAvg(FedAvg.Params(), federation(PARAMS, SIZES, blocks=BLOCKS)),
    )
    start = torch.full((6,), 0.25)
    new, _ = run_round(fedper, {"params": start}, tensors, workers=workers)
    reference, _ = run_round(fedavg, {"params": start}, tensors, workers=WORKERS)
    base = 6 - 2 * k
    assert torch.allclose(new["params"][:base], reference["params"][:base], atol=1e-4)
    assert torch.equal(new["params"][base:], start[base:])
