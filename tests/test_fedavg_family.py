"""The FedAvg family's shared parts by hand: server optimizer, aggregation weights, the pull
term, the client-terms base and the per-field config checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import FixedProbe, client_info, federation, layout, leaf_params

from fedsim.algorithms.aggregation_weights import AggregationWeights, WeightingParams
from fedsim.algorithms.base import ClientPlan, WeightedSum
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.fedavgm import FedAvgM
from fedsim.algorithms.pull import Pull
from fedsim.algorithms.server_optimizer import ServerOptimizer
from fedsim.config import load_config
from fedsim.errors import ConfigError
from lightning_modules.hooks import ClientTerms

LAYOUT = layout([("a", (2,)), ("b", (1,))])
MODELS = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([5.0, -2.0, 0.0])]
SIZES = [10, 30]
FED = federation(LAYOUT, SIZES)  # for client infos: client c holds SIZES[c] samples


def summed(weights: AggregationWeights, plans: list[ClientPlan] | None = None):
    sums: dict[str, WeightedSum] = {}
    for c, model in enumerate(MODELS):
        plan = plans[c] if plans else ClientPlan(train_params=torch.zeros(3))
        for key, (w, value) in weights.contribute(
            "params", model, plan, client_info(FED, c)
        ).items():
            sums.setdefault(key, WeightedSum()).add(w, value)
    return sums


# ------------------------------------------------------------------ server optimizer


def test_server_optimizer_lr_and_momentum_by_hand():
    opt = ServerOptimizer(lr=0.5, momentum=0.5)
    theta = torch.tensor([2.0, 0.0])
    state = {"params": theta, **opt.init(theta)}
    assert torch.equal(state["momentum"], torch.zeros(2))
    s1 = opt.step(state, torch.tensor([1.0, 1.0]))
    # d = theta - mean = (1, -1); v = 0.5 * 0 + d; theta - 0.5 v = (1.5, 0.5)
    assert torch.equal(s1["momentum"], torch.tensor([1.0, -1.0]))
    assert torch.equal(s1["params"], torch.tensor([1.5, 0.5]))
    s2 = opt.step(s1, torch.tensor([0.5, 0.5]))
    # d = (1, 0); v = 0.5 (1, -1) + (1, 0) = (1.5, -0.5); theta = (1.5, 0.5) - 0.5 v
    assert torch.equal(s2["momentum"], torch.tensor([1.5, -0.5]))
    assert torch.equal(s2["params"], torch.tensor([0.75, 0.75]))


def test_server_optimizer_without_momentum_keeps_no_buffer():
    opt = ServerOptimizer(lr=0.25)
    assert opt.init(torch.zeros(2)) == {}
    new = opt.step({"params": torch.tensor([4.0, 0.0])}, torch.tensor([0.0, 8.0]))
    assert set(new) == {"params"}
    assert torch.equal(new["params"], torch.tensor([3.0, 2.0]))  # theta + 0.25 (mean - theta)


def test_unit_lr_returns_the_mean_itself_unless_told_to_step():
    theta, mean = torch.tensor([0.1, 0.7]), torch.tensor([0.3, 0.2])
    assert ServerOptimizer().step({"params": theta}, mean)["params"] is mean
    stepped = ServerOptimizer(exact_mean=False).step({"params": theta}, mean)["params"]
    assert torch.equal(stepped, theta - (theta - mean))  # SCAFFOLD's recorded rounding


def test_fedavg_with_server_momentum_is_fedavgm():
    fedavg = FedAvg(FedAvg.Params(server_momentum=0.9), federation(LAYOUT, SIZES))
    fedavgm = FedAvgM(FedAvgM.Params(), federation(LAYOUT, SIZES))
    states = [algo.init_state(torch.ones(3)) for algo in (fedavg, fedavgm)]
    for _ in range(2):
        sums = summed(fedavg.weighting)
        states = [
            algo.aggregate(s, sums, {}, algo.context(0))
            for algo, s in zip((fedavg, fedavgm), states, strict=True)
        ]
    assert torch.equal(states[0]["params"], states[1]["params"])
    assert torch.equal(states[0]["momentum"], states[1]["momentum"])


# ------------------------------------------------------------------ aggregation weights


def test_samples_and_uniform_weights_by_hand():
    samples = AggregationWeights(WeightingParams(weighting="samples"), federation(LAYOUT, SIZES))
    mean = samples.mean(summed(samples), "params")
    assert torch.allclose(mean, torch.tensor([16 / 4, -4 / 4, 3 / 4]))  # (10 m0 + 30 m1) / 40
    uniform = AggregationWeights(WeightingParams(weighting="uniform"), federation(LAYOUT, SIZES))
    assert torch.allclose(uniform.mean(summed(uniform), "params"), torch.tensor([3.0, 0.0, 1.5]))
    assert uniform.mean({}, "params") is None  # nobody finished: the caller keeps its model
    assert samples.scorer is None and samples.train_indices(0) is None


def test_samples_weights_count_what_the_client_trains_on():
    """With a held-out split the weight is the size of the rest, not of the whole split."""
    weights = AggregationWeights(WeightingParams(weighting="samples"), federation(LAYOUT, SIZES))
    plans = [ClientPlan(torch.zeros(3), train_indices=np.arange(n)) for n in (30, 10)]
    mean = weights.mean(summed(weights, plans), "params")
    assert torch.allclose(mean, (30 * MODELS[0] + 10 * MODELS[1]) / 40)


@pytest.mark.parametrize(("weighting", "w0"), [("fedvg", 0.75), ("avg", (0.75 + 0.25) / 2)])
def test_fedvg_and_avg_weights_by_hand(weighting, w0):
    from fedsim.algorithms.fedvg import ValidationSplit

    weights = AggregationWeights(WeightingParams(weighting=weighting), federation(LAYOUT, SIZES))
    weights.scorer.validation = ValidationSplit(np.arange(32), train_subsets={})
    sums: dict[str, WeightedSum] = {}
    for c, grad in enumerate((torch.full((3,), 1.0), torch.full((3,), 3.0))):  # s = 96, 288
        client = client_info(FED, c, probe=FixedProbe(grad))
        plan = ClientPlan(train_params=torch.zeros(3))
        for key, (w, value) in weights.contribute("params", MODELS[c], plan, client).items():
            sums.setdefault(key, WeightedSum()).add(w, value)
    # fedvg: 1/96 : 1/288 = 3 : 1; avg: ((3/4 + 1/4) / 2) for client 0, samples 1/4
    expected = w0 * MODELS[0] + (1 - w0) * MODELS[1]
    assert torch.allclose(weights.mean(sums, "params"), expected, atol=1e-6)


# ------------------------------------------------------------------ the pull term


@pytest.mark.parametrize("form", ["loss", "gradient", "two_pass"])
def test_pull_value_and_gradient_by_hand(form):
    anchor = torch.tensor([1.0, -1.0, 0.0])
    pull = Pull(anchor, LAYOUT, mu=0.5, form=form)
    params = leaf_params(torch.tensor([2.0, 1.0, -2.0]), LAYOUT)
    # (mu/2) ||w - anchor||^2 = 0.25 (1 + 4 + 4); gradient mu (w - anchor) = (0.5, 1, -1)
    assert float(pull.penalty(params).detach()) == pytest.approx(2.25)
    loss = pull.loss(params)
    if form == "loss":
        loss.backward()
    else:
        assert loss is None
        params["a"].grad, params["b"].grad = torch.zeros(2), torch.zeros(1)
        pull.correct_gradients(params)
    grad = torch.cat([params["a"].grad, params["b"].grad])
    assert torch.allclose(grad, torch.tensor([0.5, 1.0, -1.0]))


def test_pull_rejects_an_unknown_form():
    with pytest.raises(ValueError, match="allowed loss, gradient, two_pass"):
        Pull(torch.zeros(3), LAYOUT, mu=0.1, form="prox")  # type: ignore[arg-type]


def test_client_terms_base_does_nothing():
    terms, p = ClientTerms(), torch.nn.Parameter(torch.ones(2))
    p.grad = torch.full((2,), 0.5)
    assert terms.loss({"w": p}) is None
    terms.correct_gradients({"w": p})
    assert torch.equal(p.grad, torch.full((2,), 0.5))


# ------------------------------------------------------------------ per-field checks


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.server_lr=0"], r"algorithm\.server_lr=0\.0: must be > 0"),
        (["algorithm.server_momentum=1"], r"algorithm\.server_momentum=1\.0: must be in \[0, 1\)"),
        # a subclass that redeclares the field (a new default) keeps its check
        (
            ["algorithm.name=fedavgm", "algorithm.server_momentum=-0.5"],
            r"algorithm\.server_momentum=-0\.5: must be in \[0, 1\)",
        ),
        (["algorithm.name=scaffold", "algorithm.global_lr=0"], r"global_lr=0\.0: must be > 0"),
        (["algorithm.name=scaffold", "algorithm.weighting=x"], r"weighting='x': allowed"),
        (["algorithm.name=feddyn", "algorithm.penalty=l1"], r"penalty='l1': allowed: norm"),
        (["algorithm.name=ditto", "algorithm.personal_epochs=0"], r"personal_epochs=0: must"),
        (["algorithm.name=fedamp", "algorithm.alpha_k=0"], r"alpha_k=0\.0: must be > 0"),
        (["algorithm.score_batch_size=0"], r"algorithm\.score_batch_size=0: must be >= 1"),
    ],
)
def test_ranges_are_checked_where_they_are_declared(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_server_keys_keep_their_names():
    params = load_config(
        None, ["algorithm.name=fedavgm", "algorithm.server_lr=0.5", "algorithm.server_momentum=0"]
    ).algorithm.params
    assert (params.server_lr, params.server_momentum) == (0.5, 0.0)
    scaffold = load_config(None, ["algorithm.name=scaffold", "algorithm.global_lr=0.5"])
    assert scaffold.algorithm.params.global_lr == 0.5
