"""FedProx, SCAFFOLD, FedDyn and FedAvgM through the seam, against hand computations."""

from __future__ import annotations

import pytest
import torch
from helpers import (
    NARROW_CNN,
    client_info,
    federation,
    layout,
    leaf_params,
    quickstart,
    reduce_updates,
)

from fedsim.algorithms.base import ClientPlan
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.fedavgm import FedAvgM
from fedsim.algorithms.feddyn import DynamicRegularizer, FedDyn
from fedsim.algorithms.fedprox import FedProx
from fedsim.algorithms.pull import Pull
from fedsim.algorithms.scaffold import Scaffold
from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment

SIZES = [10, 30, 60, 50]
PARAMS = [("a", (2,)), ("b", (2,))]  # a 4-number model: tensor a (2,) and tensor b (2,)
LAYOUT = layout(PARAMS)
FED = federation(PARAMS, SIZES)  # for client infos: client c holds SIZES[c] samples
MODELS = [
    torch.tensor([1.0, 2, 3, 4]),
    torch.tensor([0.0, 0, 0, 8]),
    torch.tensor([2.0, 1, 0, 1]),
]
FEDAVG = (10 * MODELS[0] + 30 * MODELS[1] + 60 * MODELS[2]) / 100


# ------------------------------------------------------------------ FedProx


def test_fedprox_requires_mu_and_validates_it():
    with pytest.raises(ConfigError, match=r"algorithm\.mu=null: required"):
        load_config(None, ["algorithm.name=fedprox"])
    with pytest.raises(ConfigError, match=r"algorithm\.mu=-0\.1: must be >= 0"):
        load_config(None, ["algorithm.name=fedprox", "algorithm.mu=-0.1"])
    assert load_config(None, ["algorithm.name=fedprox", "algorithm.mu=0.01"]).algorithm.params.mu


def test_proximal_term_value_and_gradient():
    glob = torch.tensor([1.0, -1.0, 0.5, 2.0])
    w = torch.tensor([2.0, 1.0, 0.5, -1.0])
    term = Pull(glob, LAYOUT, mu=0.1, form="loss")
    params = leaf_params(w, LAYOUT)
    loss = term.loss(params)
    # (mu/2) ||w - g||^2 = 0.05 * (1 + 4 + 0 + 9)
    assert float(loss.detach()) == pytest.approx(0.05 * 14)
    loss.backward()
    grad = torch.cat([params["a"].grad, params["b"].grad])
    assert torch.allclose(grad, 0.1 * (w - glob))  # grad + mu (w - w_global)


def test_fedprox_step_is_grad_plus_mu_times_drift():
    """One SGD step of a tiny linear model with the term, against the rule by hand."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    glob = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3)  # the client has drifted from the global model
    term = Pull(glob, layout([("weight", (2, 3)), ("bias", (2,))]), mu=0.5, form="loss")
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 1, 0])
    w0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ce = torch.nn.functional.cross_entropy(model(x), y)
    ce_grad = torch.cat([g.reshape(-1) for g in torch.autograd.grad(ce, model.parameters())])
    loss = torch.nn.functional.cross_entropy(model(x), y) + term.loss(
        dict(model.named_parameters())
    )
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.sub_(0.1 * p.grad)
    w1 = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.allclose(w1, w0 - 0.1 * (ce_grad + 0.5 * (w0 - glob)), atol=1e-6)


def test_fedprox_aggregates_like_fedavg_and_sends_the_term():
    algo = FedProx(FedProx.Params(mu=0.01), federation(PARAMS, SIZES[:3]))
    state = algo.init_state(torch.zeros(4))
    updates = []
    for c in range(3):
        plan = algo.client_start(algo.broadcast(state), {}, None, client_info(FED, c))
        assert isinstance(plan.terms, Pull) and plan.terms.mu == 0.01
        assert plan.terms.form == "loss"
        updates.append(algo.client_finish(plan, MODELS[c], None, client_info(FED, c)))
    new = algo.aggregate(state, reduce_updates(updates, [0, 1, 0]), {}, algo.context(0))["params"]
    assert torch.allclose(new, FEDAVG, atol=1e-6)


# ------------------------------------------------------------------ SCAFFOLD


class _Store:
    def __init__(self, states: dict):
        self.states = states

    def get(self, c: int):
        return self.states.get(c)

    def put(self, c: int, s) -> None:
        self.states[c] = s


def run_scaffold_client(algo, state, store, c, grads):
    """client_start -> K steps whose raw gradients are ``grads`` -> client_finish."""
    plan = algo.client_start(algo.broadcast(state), {}, store.get(c), client_info(FED, c))
    y = plan.train_params.clone()
    for g in grads:
        params = leaf_params(y, LAYOUT)
        params["a"].grad, params["b"].grad = g[:2].clone(), g[2:].clone()
        plan.terms.correct_gradients(params)
        y = y - 0.1 * torch.cat([params["a"].grad, params["b"].grad])  # plain SGD, lr 0.1
    return plan, y, algo.client_finish(plan, y, store.get(c), client_info(FED, c))


def test_scaffold_client_and_server_by_hand():
    algo = Scaffold(Scaffold.Params(global_lr=0.5), federation(PARAMS, SIZES))
    x = torch.tensor([1.0, 1, 1, 1])
    c = torch.tensor([0.4, 0.0, -0.4, 0.0])
    state = {"params": x, "c": c}
    c_i = torch.tensor([0.1, 0.1, 0.1, 0.1])
    store = {0: {"c": c_i}, 1: None}
    g1, g2 = torch.tensor([1.0, 0, 0, 2]), torch.tensor([3.0, 0, 2, 0])
    plan, y, update = run_scaffold_client(algo, state, _Store(store), 0, [g1, g2])
    # y <- y - lr (g + c - c_i), twice
    assert torch.allclose(y, x - 0.1 * (g1 + c - c_i) - 0.1 * (g2 + c - c_i))
    # c_i+ = c_i - c + (x - y) / (K lr), K = 2
    c_new = c_i - c + (x - y) / (2 * 0.1)
    assert torch.allclose(update.state["c"], c_new, atol=1e-6)
    assert torch.allclose(update.state["c"], (g1 + g2) / 2, atol=1e-6)
    # a second client, never seen before (c_1 = 0), takes one step
    g3 = torch.tensor([0.0, 4, 0, 0])
    _, y1, update1 = run_scaffold_client(algo, state, _Store(store), 1, [g3])
    new = algo.aggregate(state, reduce_updates([update, update1], [0, 1]), {}, algo.context(0))
    # x += eta_g mean(dy) (uniform by default); c += (1/N) sum dc, N = 4 clients
    assert torch.allclose(new["params"], x + 0.5 * ((y - x) + (y1 - x)) / 2, atol=1e-6)
    dc = (update.state["c"] - c_i) + (update1.state["c"] - 0)
    assert torch.allclose(new["c"], c + dc / 4, atol=1e-6)


@pytest.mark.parametrize("join", [4, 2])
def test_scaffold_c_stays_the_mean_of_the_client_c(join):
    """c = (1/N) sum_i c_i after every round (full participation; partial too)."""
    n = 4
    algo = Scaffold(Scaffold.Params(), federation(PARAMS, SIZES[:n]))
    state = algo.init_state(torch.zeros(4))
    store = _Store({})
    rng = torch.Generator().manual_seed(0)
    for round_idx in range(4):
        cohort = list(range(n)) if join == n else [(round_idx + k) % n for k in range(join)]
        updates = []
        for c in cohort:
            steps = 1 + c
            grads = [torch.randn(4, generator=rng) for _ in range(steps)]
            _, _, update = run_scaffold_client(algo, state, store, c, grads)
            updates.append(update)
        for c, update in zip(cohort, updates, strict=True):
            store.put(c, update.state)
        state = algo.aggregate(
            state,
            reduce_updates(updates, [k % 2 for k in range(len(cohort))]),
            {},
            algo.context(0),
        )
        mean_c = torch.stack([(store.get(c) or {"c": torch.zeros(4)})["c"] for c in range(n)])
        mean_c = mean_c.mean(0)
        assert torch.allclose(state["c"], mean_c, atol=1e-6), round_idx


@pytest.mark.slow
def test_scaffold_on_real_data_keeps_c_the_mean_of_the_stored_c(tmp_path):
    """On 5 Dirichlet clients, 2 rounds, the narrow FedAvgCNN: c is the stored c_i's mean, not
    zero, and the model learns (final acc_weighted 0.73 / 0.49 / 0.62 on seeds 0 / 1 / 2,
    PFLlib's widths 0.73 / 0.55 / 0.65, measured on this machine; chance is 0.1)."""
    cfg = quickstart(
        "rounds=2", "data.num_clients=5", "data.partition.name=dirichlet",
        "algorithm.name=scaffold", *NARROW_CNN,
    )  # fmt: skip
    result = run_experiment(cfg, tmp_path / "run", progress=False)
    stored = torch.stack([result.client_store.get(c)["c"] for c in range(5)])
    assert torch.allclose(result.state["c"], stored.mean(0), atol=1e-6)
    assert result.state["c"].abs().sum() > 0
    assert result.summary["final"]["acc_weighted"] > 0.2


# ------------------------------------------------------------------ FedDyn


def test_dynamic_regularizer_value_and_gradient():
    g = torch.tensor([1.0, 0, 0, 0])
    h = torch.tensor([0.5, -1, 0, 2])
    w = torch.tensor([4.0, 4, 0, 0])
    term = DynamicRegularizer(g, h, LAYOUT, alpha=0.2, squared=False)
    params = leaf_params(w, LAYOUT)
    loss = term.loss(params)
    # alpha/2 ||w - g|| - <w, h> = 0.1 * ||(3, 4, 0, 0)|| - (2 - 4) = 0.5 + 2
    assert float(loss.detach()) == pytest.approx(2.5)
    loss.backward()
    grad = torch.cat([params["a"].grad, params["b"].grad])
    assert torch.allclose(grad, 0.1 * (w - g) / 5.0 - h)
    squared = DynamicRegularizer(g, h, LAYOUT, alpha=0.2, squared=True)
    assert float(squared.loss(leaf_params(w, LAYOUT)).detach()) == pytest.approx(0.1 * 25.0 + 2)


def test_dynamic_regularizer_has_a_finite_gradient_at_the_global_model():
    g = torch.tensor([1.0, 2, 3, 4])
    term = DynamicRegularizer(g, torch.zeros(4), LAYOUT, alpha=0.1, squared=False)
    params = leaf_params(g, LAYOUT)
    term.loss(params).backward()
    assert torch.isfinite(params["a"].grad).all() and torch.isfinite(params["b"].grad).all()


def test_feddyn_client_state_and_server_by_hand():
    alpha = 0.1
    algo = FedDyn(FedDyn.Params(alpha=alpha), federation(PARAMS, SIZES))
    g = torch.tensor([1.0, 1, 1, 1])
    h = torch.tensor([0.2, 0, 0, -0.2])
    state = {"params": g, "h": h}
    h_0 = torch.tensor([1.0, 0, 0, 0])
    updates = []
    for c, client_state in ((0, {"h": h_0}), (1, None)):
        plan = algo.client_start(algo.broadcast(state), {}, client_state, client_info(FED, c))
        plan.terms.loss(leaf_params(g, LAYOUT))  # the module calls it while training
        updates.append(algo.client_finish(plan, MODELS[c], client_state, client_info(FED, c)))
    # h_i <- h_i - alpha (w_i - g)
    assert torch.allclose(updates[0].state["h"], h_0 - alpha * (MODELS[0] - g))
    assert torch.allclose(updates[1].state["h"], -alpha * (MODELS[1] - g))
    new = algo.aggregate(state, reduce_updates(updates, [0, 0]), {}, algo.context(0))
    # server: h <- h - alpha (1/N) sum (w_i - g), N = 4; g = mean(w_i) - h / alpha
    h_new = h - alpha * ((MODELS[0] - g) + (MODELS[1] - g)) / 4
    assert torch.allclose(new["h"], h_new, atol=1e-6)
    assert torch.allclose(new["params"], (MODELS[0] + MODELS[1]) / 2 - h_new / alpha, atol=1e-5)


# ------------------------------------------------------------------ FedAvgM


def test_fedavgm_two_rounds_by_hand():
    algo = FedAvgM(FedAvgM.Params(), federation(PARAMS, SIZES[:3]))
    theta = torch.tensor([1.0, 1, 1, 1])
    state = algo.init_state(theta)
    updates = [
        algo.client_finish(bare_plan(), MODELS[c], None, client_info(FED, c)) for c in range(3)
    ]
    s1 = algo.aggregate(state, reduce_updates(updates, [0, 1, 1]), {}, algo.context(0))
    d1 = theta - FEDAVG  # pseudo-gradient sum_k (n_k / n)(theta - theta_k)
    assert torch.allclose(s1["momentum"], d1, atol=1e-6)
    assert torch.allclose(s1["params"], theta - 1.0 * d1, atol=1e-6)  # lr 1: FedAvg's model
    models2 = [m + 1 for m in MODELS]
    updates = [
        algo.client_finish(bare_plan(), models2[c], None, client_info(FED, c)) for c in range(3)
    ]
    s2 = algo.aggregate(s1, reduce_updates(updates, [0, 0, 1]), {}, algo.context(1))
    d2 = s1["params"] - (FEDAVG + 1)
    v2 = 0.9 * d1 + d2
    assert torch.allclose(s2["momentum"], v2, atol=1e-5)
    assert torch.allclose(s2["params"], s1["params"] - v2, atol=1e-5)


def bare_plan() -> ClientPlan:
    """A plan with nothing held out."""
    return ClientPlan(train_params=torch.zeros(4))


# ------------------------------------------------------------------ the shared weighting


@pytest.mark.parametrize("cls", [FedProx, FedAvgM, Scaffold, FedDyn])
def test_samples_weighting_is_fedavg_weighting(cls):
    """weighting=samples gives every family member FedAvg's n_i / sum n mean."""
    kwargs = {"mu": 0.0} if cls is FedProx else {}
    algo = cls(cls.Params(weighting="samples", **kwargs), federation(PARAMS, SIZES[:3]))
    updates = [algo.client_finish(*_started(algo, c), None, client_info(FED, c)) for c in range(3)]
    assert torch.allclose(algo.weighting.mean(reduce_updates(updates, [0, 1, 0]), "params"), FEDAVG)
    fedavg = FedAvg(FedAvg.Params(), federation(PARAMS, SIZES[:3]))
    plain = [
        fedavg.client_finish(bare_plan(), MODELS[c], None, client_info(FED, c)) for c in range(3)
    ]
    assert fedavg.aggregate({}, reduce_updates(plain, [0, 0, 0]), {}, fedavg.context(0))[
        "params"
    ].allclose(FEDAVG)


def _started(algo, c):
    state = algo.init_state(torch.zeros(4))
    plan = algo.client_start(algo.broadcast(state), {}, None, client_info(FED, c))
    if plan.terms is not None:
        plan.terms.loss(leaf_params(torch.zeros(4), LAYOUT))
    return plan, MODELS[c]
