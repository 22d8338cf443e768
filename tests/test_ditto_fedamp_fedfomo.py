"""Ditto, FedAMP and FedFomo through the seam: hand computations and one real worker round."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from helpers import client_info, federation, quickstart, reduce_updates

from fedsim.algorithms.base import FederationInfo
from fedsim.algorithms.ditto import Ditto, DittoParams
from fedsim.algorithms.fedamp import (
    FedAMP,
    FedAMPParams,
    attention_coefficients,
    cloud_model,
)
from fedsim.algorithms.fedfomo import FedFomo, FedFomoParams, fomo_weights, split_validation
from fedsim.algorithms.pull import Pull
from fedsim.round_context import static_context
from fedsim.runtime.worker import ClientTask, ClientWorker, WorkerProbe
from fedsim.simulation import Simulation
from lightning_modules.flat_params import ParamEntry, ParamLayout

SIZES = [10, 30, 60, 40]


def fed() -> FederationInfo:
    """Four clients (SIZES), one tensor w (2,); client c's train indices 100 c ... 100 c + 49."""
    return federation(
        [("w", (2,))],
        SIZES,
        client_train_indices=[np.arange(100 * c, 100 * c + 50) for c in range(len(SIZES))],
    )


FED = fed()  # for client infos


@dataclass
class Result:
    correct: int
    loss_sum: float
    num_samples: int


class FakeProbe:
    """Loss = a chosen function of the parameters; 'training' moves towards a target."""

    def __init__(self, loss_of=None, target=None, n_train=50):
        self.train_indices = np.arange(n_train)
        self.test_indices = np.arange(n_train, n_train + 10)
        self.loss_of = loss_of or (lambda p: float(p.sum()))
        self.target = target
        self.calls = []

    def evaluate(self, params, indices=None):
        n = len(indices) if indices is not None else 10
        return Result(correct=0, loss_sum=self.loss_of(params) * n, num_samples=n)

    def train(self, params, *, epochs=1, terms=None, frozen=None, indices=None, key=0, label=None):
        self.calls.append({"params": params.clone(), "terms": terms, "key": key})
        return (params + self.target) / 2, 0.1


# --- Ditto ---


def test_ditto_server_is_fedavg_of_the_global_copies_and_clients_keep_a_personal_model():
    algo = Ditto(DittoParams(mu=0.5), fed())
    state = algo.init_state(torch.zeros(2))
    trained = {0: torch.tensor([1.0, 2.0]), 1: torch.tensor([3.0, -1.0])}
    updates, personal = [], {}
    for c in (0, 1):
        probe = FakeProbe(target=torch.tensor([10.0, 10.0]))
        plan = algo.client_start(algo.broadcast(state), {}, None, client_info(FED, c, probe=probe))
        assert torch.equal(plan.train_params, state["params"])  # the global copy trains
        update = algo.client_finish(plan, trained[c], None, client_info(FED, c, probe=probe))
        updates.append(update)
        personal[c] = update.state["personal"]
        (call,) = probe.calls  # one personal pass, from v (= w_t at first) pulled to w_t
        assert torch.equal(call["params"], state["params"])
        assert torch.equal(call["terms"].anchor, state["params"]) and call["terms"].mu == 0.5
    new = algo.aggregate(state, reduce_updates(updates, [0, 1]), {}, algo.context(0))["params"]
    # hand: (10 [1, 2] + 30 [3, -1]) / 40
    assert torch.allclose(new, torch.tensor([100 / 40, -10 / 40]))
    assert torch.equal(personal[0], torch.tensor([5.0, 5.0]))  # (0 + 10) / 2
    # next round: evaluated with its personal model, trains the new global model
    plan = algo.client_start({"params": new}, {}, {"personal": personal[0]}, client_info(FED, 0))
    assert torch.equal(plan.eval_params, personal[0]) and torch.equal(plan.train_params, new)


def test_ditto_prox_gradient_is_grad_plus_mu_times_distance():
    layout = ParamLayout([ParamEntry("w", (3,), 0, 3)])
    anchor = torch.tensor([1.0, 0.0, -1.0])
    p = torch.nn.Parameter(torch.tensor([2.0, 2.0, 2.0]))
    p.grad = torch.tensor([0.1, 0.2, 0.3])
    Pull(anchor, layout, mu=0.5, form="gradient").correct_gradients({"w": p})
    assert torch.allclose(p.grad, torch.tensor([0.1 + 0.5, 0.2 + 1.0, 0.3 + 1.5]))


# --- FedAMP ---


def test_fedamp_cloud_model_matches_hand_computation():
    own = torch.tensor([0.0, 0.0])
    peers = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    ids = [1, 2, 0]  # the last row is the client itself: coefficient 0
    alpha, sigma = 0.1, 2.0
    c = attention_coefficients(own, peers, ids, client=0, alpha_k=alpha, sigma=sigma)
    c1, c2 = alpha * math.exp(-1 / sigma) / sigma, alpha * math.exp(-4 / sigma) / sigma
    assert torch.allclose(c, torch.tensor([c1, c2, 0.0], dtype=torch.float64))
    u = cloud_model(own, peers, ids, 0, alpha, sigma)
    assert torch.allclose(u, torch.tensor([c1 * 1.0, c2 * 2.0]), atol=1e-7)
    assert torch.equal(cloud_model(own, None, [], 0, alpha, sigma), own)  # round 0


def test_fedamp_pull_carries_gradient_to_the_local_model():
    """The step adds (lamda / alpha_k)(w - u): autograd's gradient of the squared pull."""
    layout = ParamLayout([ParamEntry("w", (2,), 0, 2)])
    u = torch.tensor([1.0, -1.0])
    w = torch.nn.Parameter(torch.tensor([3.0, 0.0]))
    lamda, alpha = 0.4, 0.1
    pull = Pull(u, layout, lamda / alpha, form="two_pass")
    penalty = pull.penalty({"w": w})
    penalty.backward()
    assert penalty.item() == pytest.approx(lamda / (2 * alpha) * (4 + 1))
    assert pull.loss({"w": w}) is None  # the gradient is added in correct_gradients
    autograd = w.grad.clone()
    assert torch.allclose(autograd, lamda / alpha * (w.detach() - u))
    w.grad = torch.tensor([0.25, -0.5])  # the CE gradient of a minibatch
    pull.correct_gradients({"w": w})
    assert torch.allclose(w.grad, torch.tensor([0.25, -0.5]) + autograd)


def test_fedamp_round_uploads_models_and_next_peers_are_this_rounds_uploads():
    algo = FedAMP(FedAMPParams(lamda=1.0, alpha_k=0.1, sigma=1.0), fed())
    state = algo.init_state(torch.zeros(2))
    plan = algo.client_start(algo.broadcast(state), {}, None, client_info(FED, 0))
    assert torch.equal(plan.terms.anchor, torch.zeros(2))  # no peers yet: u_i = w_i
    uploads = {2: torch.tensor([1.0, 1.0]), 0: torch.tensor([0.0, 1.0])}
    individual = {}
    for c, w in uploads.items():
        update = algo.client_finish(plan, w, None, client_info(FED, c))
        assert update.sums == {} and torch.equal(update.state["params"], w)
        individual[c] = update.individual
    new = algo.aggregate(state, {}, individual, algo.context(0))
    assert new["peer_ids"] == [0, 2]
    assert torch.equal(new["peers"], torch.stack([uploads[0], uploads[2]]))
    plan = algo.client_start(algo.broadcast(new), {}, {"params": uploads[0]}, client_info(FED, 0))
    c = 0.1 * math.exp(-1.0)  # ||[0,1] - [1,1]||^2 = 1; the client itself gets 0
    expected = c * uploads[2] + (1 - c) * uploads[0]
    assert torch.allclose(plan.terms.anchor, expected, atol=1e-7)
    assert plan.terms.mu == pytest.approx(1.0 / 0.1) and plan.terms.form == "two_pass"
    assert torch.equal(plan.train_params, uploads[0])


# --- FedFomo ---


def test_fedfomo_weights_on_a_crafted_case():
    """Old model at 0 with loss 1.0; peers with known losses and distances."""
    algo = FedFomo(FedFomoParams(peers=3, reference="trained"), fed())
    old = torch.tensor([0.0, 0.0])
    peers = [torch.tensor([3.0, 4.0]), torch.tensor([0.0, 1.0]), torch.tensor([6.0, 8.0])]
    losses = {(3.0, 4.0): 0.5, (0.0, 1.0): 0.8, (6.0, 8.0): 1.5}
    probe = FakeProbe(loss_of=lambda p: 1.0 if not p.any() else losses[tuple(p.tolist())])
    client = client_info(FED, 0, probe=probe)
    payload = {"peer_ids": [2, 1, 3], "peers": peers}
    plan = algo.client_start({"params": old}, payload, {"params": old}, client)
    raw = plan.context["weights"]
    # hand: (1 - 0.5) / (5 + 1e-5), (1 - 0.8) / (1 + 1e-5), (1 - 1.5) / (10 + 1e-5)
    expected = torch.tensor([0.5 / (5 + 1e-5), 0.2 / (1 + 1e-5), -0.5 / (10 + 1e-5)])
    assert torch.allclose(raw, expected.double())
    assert torch.allclose(raw, fomo_weights(1.0, [0.5, 0.8, 1.5], [5.0, 1.0, 10.0]))
    w1, w2 = expected[0].item(), expected[1].item()
    mixed = (w1 * peers[0] + w2 * peers[1]) / (w1 + w2)  # the harmful peer gets 0
    assert torch.allclose(plan.train_params, mixed, atol=1e-6)
    assert plan.eval_params is None  # evaluated with the mix
    # the upload feeds P[0, n] += raw w_n
    update = algo.client_finish(plan, torch.tensor([9.0, 9.0]), None, client)
    state = algo.init_state(torch.zeros(2))
    new = algo.aggregate(state, {}, {0: update.individual}, algo.context(0))
    row = new["affinity"][0]
    assert row[0] == 1.0 and torch.allclose(row[[2, 1, 3]], expected.double())
    assert torch.equal(new["models"].get(0)["params"], torch.tensor([9.0, 9.0]))
    new["models"].close()


def test_fedfomo_keeps_its_model_when_no_peer_helps():
    algo = FedFomo(FedFomoParams(reference="trained"), fed())
    own = torch.tensor([1.0, 1.0])
    probe = FakeProbe(loss_of=lambda p: float(p.abs().sum()))  # own: 2, peers: worse
    client = client_info(FED, 0, probe=probe)
    payload = {"peer_ids": [1, 2], "peers": [torch.tensor([5.0, 5.0]), torch.tensor([-3.0, 0])]}
    plan = algo.client_start({"params": torch.zeros(2)}, payload, {"params": own}, client)
    assert torch.equal(plan.train_params, own)
    assert (plan.context["weights"] < 0).all()


def test_fedfomo_reference_start_scores_against_the_model_it_last_started_from():
    algo = FedFomo(FedFomoParams(reference="start"), fed())
    state = {"params": torch.tensor([2.0, 0.0]), "start": torch.tensor([0.0, 0.0])}
    probe = FakeProbe(loss_of=lambda p: float(p[0]))  # start: 0, current: 2, peer: 1
    client = client_info(FED, 0, probe=probe)
    payload = {"peer_ids": [3], "peers": [torch.tensor([1.0, 0.0])]}
    plan = algo.client_start({"params": torch.zeros(2)}, payload, state, client)
    assert plan.context["weights"].item() == pytest.approx(-1 / (1 + 1e-5))
    assert torch.equal(plan.train_params, state["params"])  # kept: the current model
    update = algo.client_finish(plan, torch.tensor([7.0, 7.0]), state, client)
    assert torch.equal(update.state["start"], state["params"])


def test_fedfomo_server_sends_top_m_by_affinity_among_uploaded_clients():
    algo = FedFomo(FedFomoParams(peers=2), fed())
    state = algo.init_state(torch.zeros(2))
    assert algo.client_payload(state, 0) == {"peer_ids": [], "peers": []}  # round 0
    for c in range(4):
        state["models"].put(c, {"params": torch.full((2,), float(c))})
    state["affinity"][1] = torch.tensor([0.3, 1.0, -0.2, 0.3], dtype=torch.float64)
    payload = algo.client_payload(state, 1)
    assert payload["peer_ids"] == [1, 0]  # 1.0, then the 0.3 tie goes to the smaller id
    assert torch.equal(payload["peers"][1], torch.zeros(2))
    state["models"].close()


def test_fedfomo_holds_out_a_fixed_fifth_of_train_as_validation():
    train = np.arange(500, 600)
    kept, val = split_validation(train, 0.2, client=3)
    assert len(val) == 20 and len(kept) == 80
    assert set(kept).isdisjoint(val) and set(kept) | set(val) == set(train)
    again, val_again = split_validation(train, 0.2, client=3)
    assert np.array_equal(val, val_again)
    assert len(split_validation(np.arange(3), 0.2, client=0)[1]) == 1  # at least one


# --- one real round on real data (mnist-5k, 20 clients: ~190 samples each) through a worker ---


@pytest.fixture(scope="module")
def real():
    """A Simulation (for its data and spec) on 20 pathological mnist-5k clients."""
    cfg = quickstart("data.num_clients=20", "data.partition.name=pathological")
    return Simulation(cfg)


def worker_for(sim: Simulation, algorithm) -> ClientWorker:
    spec = sim.worker_spec
    spec = type(spec)(**{**spec.__dict__, "algorithm": algorithm})
    return ClientWorker(spec, sim.data)


def one_round(sim, algorithm, client=0, state=None):
    worker = worker_for(sim, algorithm)
    server = algorithm.init_state(sim.initial_params)
    task = ClientTask(
        client=client,
        payload=algorithm.client_payload(server, client),
        state=state,
        evaluate=False,
        train=True,
    )
    result = worker.run(0, algorithm.broadcast(server), [task])
    return result, server


def test_ditto_personal_model_differs_from_the_global_after_a_real_round(real):
    algo = Ditto(DittoParams(mu=0.1), real.federation)
    result, _ = one_round(real, algo)
    (client,) = result.clients
    uploaded = result.sums["params"].mean()
    personal = client.state["personal"]
    assert not client.failed and torch.isfinite(personal).all()
    assert (personal - uploaded).abs().max() > 1e-3
    assert (personal - real.initial_params).abs().max() > 1e-3  # it did train


def test_fedamp_with_lambda_differs_from_local_only_on_a_real_round(real):
    """With peers in the broadcast, lamda > 0 moves training; lamda = 0 is Local-only."""
    from fedsim.algorithms.local import LocalOnly

    peers = real.initial_params + 0.01 * torch.randn(
        3, real.initial_params.numel(), generator=torch.Generator().manual_seed(0)
    )

    def trained_with(algorithm):
        worker = worker_for(real, algorithm)
        broadcast = {"params": real.initial_params, "peers": peers, "peer_ids": [1, 2, 3]}
        task = ClientTask(client=0, payload={}, state=None, evaluate=False, train=True)
        return worker.run(1, broadcast, [task]).clients[0].state["params"]

    local = trained_with(LocalOnly(LocalOnly.Params(), real.federation))
    off = trained_with(FedAMP(FedAMPParams(lamda=0.0), real.federation))
    on = trained_with(FedAMP(FedAMPParams(lamda=0.05, alpha_k=0.05), real.federation))
    detached = trained_with(DetachedFedAMP(FedAMPParams(lamda=0.05), real.federation))
    assert torch.equal(off, local)
    assert (on - local).abs().max() > 1e-3
    assert torch.equal(detached, local)  # PFLlib's way: the same numbers as Local-only


class DetachedPull(Pull):
    """PFLlib's clientamp: the term built from ``p.data``, so no gradient reaches w."""

    def loss(self, params):
        return self.penalty({name: p.detach() for name, p in params.items()})

    def correct_gradients(self, params):
        return None


class DetachedFedAMP(FedAMP):
    def client_start(self, broadcast, payload, state, client):
        plan = super().client_start(broadcast, payload, state, client)
        plan.terms = DetachedPull(plan.terms.anchor, plan.terms.layout, plan.terms.mu)
        return plan


def test_worker_probe_train_keeps_frozen_entries_and_is_seeded(real):
    """The seam extension FedPer's fine-tune and Ditto's personal pass run through."""
    from fedsim.algorithms.fedper import FedPer, FedPerParams

    algo = FedPer(FedPerParams(personal_layers=1), real.federation)
    worker = worker_for(real, algo)
    base = algo.base_names[1]
    probe = WorkerProbe(worker, client=1, context=static_context(3, worker.algorithm.params))
    start = real.initial_params
    tuned, loss = probe.train(start, epochs=1, frozen=base, key=5)
    again, _ = probe.train(start, epochs=1, frozen=base, key=5)
    head = real.federation.layout.mask(real.federation.head_names)
    assert math.isfinite(loss) and torch.equal(tuned, again)
    assert torch.equal(tuned[~head], start[~head])
    assert (tuned[head] - start[head]).abs().max() > 1e-4
    assert all(p.requires_grad for p in worker.module.parameters())  # restored
