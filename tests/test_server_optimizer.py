"""Server optimizers (Reddi et al. 2021, Algorithm 2): two rounds by hand for each, and
FedAdam / FedYogi / FedAdagrad composing with FedProx, SCAFFOLD and FedVG's weights."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import NARROW_CNN, quickstart

from fedsim.algorithms.server_optimizer import ServerOptimizer
from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment

X0 = torch.tensor([1.0, -2.0])
MEANS = [torch.tensor([1.5, -2.5]), torch.tensor([1.2, -1.0])]  # the clients' mean, rounds 1-2
LR, B1, B2, TAU = 0.1, 0.9, 0.99, 1e-3


def by_hand(kind: str) -> list[list[float]]:
    """Algorithm 2 per coordinate in plain floats: m0 = 0, v_{-1} = tau^2."""
    x, m, v, out = X0.tolist(), [0.0, 0.0], [TAU**2] * 2, []
    for mean in MEANS:
        for i in range(2):
            delta = mean[i].item() - x[i]
            m[i] = B1 * m[i] + (1 - B1) * delta
            if kind == "adagrad":
                v[i] = v[i] + delta**2
            elif kind == "yogi":
                v[i] = v[i] - (1 - B2) * delta**2 * math.copysign(1, v[i] - delta**2)
            else:
                v[i] = B2 * v[i] + (1 - B2) * delta**2
            x[i] = x[i] + LR * m[i] / (math.sqrt(v[i]) + TAU)
        out.append(list(x))
    return out


@pytest.mark.parametrize("kind", ["adagrad", "yogi", "adam"])
def test_two_rounds_by_hand(kind):
    opt = ServerOptimizer(lr=LR, kind=kind, beta1=B1, beta2=B2, tau=TAU)
    state = {"params": X0.clone(), **opt.init(X0)}
    assert torch.equal(state["server_v"], torch.full((2,), TAU**2))
    for mean, expected in zip(MEANS, by_hand(kind), strict=True):
        state = {**state, **opt.step(state, mean)}
        assert state["params"].tolist() == pytest.approx(expected, rel=1e-5)


def test_first_adam_step_is_about_lr_in_each_coordinate():
    """Round 1 from v = tau^2 with Delta = +-0.5: m = 0.05, v = 0.99e-6 + 0.0025, so the step
    is 0.1 * 0.05 / (0.05001 + 0.001) = 0.0980 per coordinate (Adam's sign-like first step)."""
    opt = ServerOptimizer(lr=LR, kind="adam")
    state = {"params": X0.clone(), **opt.init(X0)}
    step = opt.step(state, MEANS[0])["params"] - X0
    assert step.tolist() == pytest.approx([0.0980, -0.0980], abs=1e-4)


def test_sgd_default_is_the_mean_itself():
    opt = ServerOptimizer()
    assert opt.init(X0) == {}
    assert opt.step({"params": X0}, MEANS[0])["params"] is MEANS[0]


@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm.name=fedavg"],
        ["algorithm.name=fedprox", "algorithm.mu=0.01"],
        ["algorithm.name=scaffold"],
        ["algorithm.name=fedavg", "algorithm.weighting=fedvg"],
    ],
    ids=["fedadam", "fedprox+adam", "scaffold+adam", "fedvg-weights+adam"],
)
def test_adam_composes_with_the_family(overrides, tmp_path):
    torch.set_num_threads(1)
    tiny = ["rounds=2", "data.num_clients=4", "data.max_samples=400", "client.lr=0.05",
            *NARROW_CNN]  # fmt: skip
    lr = "algorithm.global_lr=0.01" if "scaffold" in overrides[0] else "algorithm.server_lr=0.01"
    adam = run_experiment(
        quickstart(*tiny, *overrides, "algorithm.server_optimizer=adam", lr), tmp_path / "a",
        progress=False, report=False,
    )  # fmt: skip
    plain = run_experiment(quickstart(*tiny, *overrides), tmp_path / "s", progress=False,
                           report=False)  # fmt: skip
    assert {"server_m", "server_v"} <= set(adam.state)
    assert not torch.equal(adam.state["params"], plain.state["params"])
    assert adam.summary["status"] == "completed"
    if "scaffold" in overrides[0]:
        assert torch.count_nonzero(adam.state["c"]) > 0  # control variates still move


def test_keys_of_another_optimizer_are_refused():
    with pytest.raises(ConfigError, match=r"algorithm\.beta1=0\.5: acts only with"):
        quickstart("algorithm.beta1=0.5")
    with pytest.raises(ConfigError, match=r"algorithm\.server_momentum=0\.9: acts only with"):
        quickstart("algorithm.server_optimizer=adam", "algorithm.server_momentum=0.9")
    with pytest.raises(ConfigError, match=r"algorithm\.server_optimizer='rmsprop'"):
        quickstart("algorithm.server_optimizer=rmsprop")
