"""cwFedAvg: hand-computed class-wise aggregation, its laws, configs, the heatmap (WDR:
test_cwfedavg_wdr.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import client_info, module_federation, run_round
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from fedsim.algorithms.base import FederationInfo
from fedsim.algorithms.cwfedavg import (
    ROW_NORMS_PNG,
    CwFedAvg,
    CwFedAvgParams,
    estimated_proportions,
    mean_row_correlation,
)
from fedsim.algorithms.fedavg import FedAvg
from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.figures import Figure
from fedsim.tracking.plots import write_figures
from lightning_modules.base import FLModule
from lightning_modules.flat_params import bind_flat_parameters

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
K = 3


class TinyNet(FLModule):
    """body: Linear(2, 2); fc (the head): Linear(2, 3). 6 + 9 = 15 parameters."""

    block_names = ("body", "fc")

    def __init__(self, num_classes: int = K) -> None:
        super().__init__()
        self.body = nn.Linear(2, 2)
        self.fc = nn.Linear(2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.body(x)))


def federation(class_counts: np.ndarray, module: FLModule | None = None) -> FederationInfo:
    """One client per row of ``class_counts``, on ``module`` (default a TinyNet)."""
    return module_federation(module or TinyNet(class_counts.shape[1]), class_counts)


def flat(body: list[float], head_w: list[list[float]], head_b: list[float]) -> torch.Tensor:
    """A TinyNet flat vector: body.weight (2x2), body.bias (2), fc.weight (Kx2), fc.bias (K)."""
    return torch.tensor(body + [v for row in head_w for v in row] + head_b, dtype=torch.float32)


def personalized(algo, state, client: int, fed: FederationInfo, client_state=None) -> torch.Tensor:
    plan = algo.client_start(algo.broadcast(state), {}, client_state, client_info(fed, client))
    return plan.train_params if plan.eval_params is None else plan.eval_params


# ---------------------------------------------------------------- config


def test_params_reject_bad_values_with_the_key() -> None:
    for key, value in (
        ("class_weights", "oracle"),
        ("classwise_layers", "middle"),
        ("classwise_layers", "top-0"),
    ):
        with pytest.raises(ConfigError, match=f"algorithm.{key}"):
            CwFedAvgParams(**{key: value})
    # a range declared on its field (it also takes a schedule), checked as the config is read
    with pytest.raises(ConfigError, match=r"algorithm.wdr_lambda=-1.0: must be >= 0"):
        load_config(None, ["algorithm.name=cwfedavg", "algorithm.wdr_lambda=-1"])
    with pytest.raises(ConfigError, match="algorithm.class_weights"):
        load_config(None, ["algorithm.name=cwfedavg", "algorithm.class_weights=counts"])
    with pytest.raises(ConfigError, match="algorithm.class_weights"):
        load_config(None, ["algorithm.name=cwfedavg", "algorithm.class_weights=false"])
    # a bare `true` is a YAML boolean: it still means r = true class proportions
    cfg = load_config(None, ["algorithm.name=cwfedavg", "algorithm.class_weights=true"])
    assert cfg.algorithm.params.class_weights == "true"
    with pytest.raises(ConfigError, match="algorithm.classwise_layers"):
        CwFedAvg(CwFedAvgParams(classwise_layers="top-3"), federation(np.ones((2, K), int)))


def test_every_config_in_configs_loads() -> None:
    paths = sorted(CONFIGS.rglob("*.yaml"))
    assert len(list((CONFIGS / "cwfedavg").glob("*.yaml"))) >= 12
    for path in paths:
        cfg = load_config(path)
        assert cfg.rounds >= 1, path
        if cfg.algorithm.name == "cwfedavg":
            assert isinstance(cfg.algorithm.params, CwFedAvgParams)


# ---------------------------------------------------------------- hand-computed aggregation

# 3 clients x 3 classes; n = 10, 20, 15.
COUNTS = np.array([[6, 3, 1], [0, 10, 10], [3, 0, 12]])


def test_hand_computed_true_r_all_layers() -> None:
    fed = federation(COUNTS)
    algo = CwFedAvg(CwFedAvgParams(class_weights="true", classwise_layers="all"), fed)
    state = algo.init_state(torch.zeros(15))
    # client i uploads the constant vector c_i = 1, 2, 4
    trained = {i: torch.full((15,), c) for i, c in enumerate((1.0, 2.0, 4.0))}
    state, _ = run_round(algo, state, trained)
    # q_ij = n_ij / sum_k n_kj: class 0 (6, 0, 3)/9, class 1 (3, 10, 0)/13, class 2 (1, 10, 12)/23
    expected = [(6 * 1 + 3 * 4) / 9, (3 * 1 + 10 * 2) / 13, (1 * 1 + 10 * 2 + 12 * 4) / 23]
    for j in range(K):
        torch.testing.assert_close(state["class_models"][j], torch.full((15,), expected[j]))
    assert "params" not in state  # all layers are class-wise: no FedAvg model is kept
    # w_0 = 0.6 w_0^G + 0.3 w_1^G + 0.1 w_2^G
    mix = 0.6 * 2.0 + 0.3 * 23 / 13 + 0.1 * 3.0
    torch.testing.assert_close(personalized(algo, state, 0, fed), torch.full((15,), mix))


def test_hand_computed_estimated_r_output_layer() -> None:
    fed = federation(COUNTS)
    algo = CwFedAvg(CwFedAvgParams(class_weights="estimated", classwise_layers="output"), fed)
    state = algo.init_state(torch.zeros(15))
    # head rows chosen so that the row norms give r exactly:
    # client 0 norms (3, 1, 0) -> r = (.75, .25, 0); client 1 (0, 2, 2) -> (0, .5, .5);
    # client 2 (1, 0, 3) -> (.25, 0, .75)
    trained = {
        0: flat([1, 1, 1, 1, 1, 1], [[3, 0], [0, 1], [0, 0]], [1, 1, 1]),
        1: flat([2, 2, 2, 2, 2, 2], [[0, 0], [2, 0], [0, 2]], [2, 2, 2]),
        2: flat([4, 4, 4, 4, 4, 4], [[1, 0], [0, 0], [0, 3]], [4, 4, 4]),
    }
    state, updates = run_round(algo, state, trained)
    # u = n r: c0 (7.5, 2.5, 0), c1 (0, 10, 10), c2 (3.75, 0, 11.25)
    # q: class 0 (2/3, 0, 1/3); class 1 (.2, .8, 0); class 2 (0, 8/17, 9/17)
    expected_heads = [
        ([[7 / 3, 0], [0, 2 / 3], [0, 1]], [2.0] * 3),
        ([[0.6, 0], [1.6, 0.2], [0, 1.6]], [1.8] * 3),
        ([[9 / 17, 0], [16 / 17, 0], [0, 43 / 17]], [52 / 17] * 3),
    ]
    for j, (w, b) in enumerate(expected_heads):
        head = torch.tensor([v for row in w for v in row] + b, dtype=torch.float32)
        torch.testing.assert_close(state["class_models"][j], head)
    # the rest is FedAvg: (10 * 1 + 20 * 2 + 15 * 4) / 45
    torch.testing.assert_close(state["params"][:6], torch.full((6,), 110 / 45))
    torch.testing.assert_close(updates[0].state["r"], torch.tensor([0.75, 0.25, 0.0]))
    # next round, client 0 mixes by its own estimated r: 0.75 w_0^G + 0.25 w_1^G on the head
    w0 = personalized(algo, state, 0, fed, updates[0].state)
    torch.testing.assert_close(w0[:6], torch.full((6,), 110 / 45))
    torch.testing.assert_close(
        w0[6:], 0.75 * state["class_models"][0] + 0.25 * state["class_models"][1]
    )
    torch.testing.assert_close(w0[-3:], torch.full((3,), 0.75 * 2.0 + 0.25 * 1.8))


def test_partial_participation_keeps_unheld_class_models() -> None:
    fed = federation(COUNTS)
    algo = CwFedAvg(CwFedAvgParams(class_weights="true", classwise_layers="all"), fed)
    initial = torch.arange(15, dtype=torch.float32)
    state = algo.init_state(initial)
    state, _ = run_round(algo, state, {1: torch.full((15,), 7.0)})  # client 1: classes 1, 2
    torch.testing.assert_close(state["class_models"][0], initial)  # nobody held class 0
    torch.testing.assert_close(state["class_models"][1], torch.full((15,), 7.0))
    torch.testing.assert_close(state["class_models"][2], torch.full((15,), 7.0))


def test_round_zero_every_client_gets_the_initial_model() -> None:
    fed = federation(COUNTS)
    initial = torch.randn(15)
    for weights in ("estimated", "true"):
        for layers in ("output", "all", "top-2"):
            algo = CwFedAvg(CwFedAvgParams(class_weights=weights, classwise_layers=layers), fed)
            state = algo.init_state(initial)
            for client in range(3):
                torch.testing.assert_close(personalized(algo, state, client, fed), initial)


def test_estimated_r_before_training_is_the_initial_heads_row_norms() -> None:
    module = TinyNet()
    fed = federation(COUNTS, module)
    flat_params, layout = bind_flat_parameters(module)
    algo = CwFedAvg(CwFedAvgParams(), fed)
    state = algo.init_state(flat_params.clone())
    expected = estimated_proportions(module.fc.weight.detach())
    torch.testing.assert_close(
        algo.client_r(algo.broadcast(state), None, client_info(fed, 0)), expected
    )


def test_output_mode_server_stores_k_heads_only() -> None:
    fed = federation(COUNTS)
    state = CwFedAvg(CwFedAvgParams(classwise_layers="output"), fed).init_state(torch.zeros(15))
    assert tuple(state["class_models"].shape) == (K, 9)  # fc.weight (3x2) + fc.bias (3)
    state = CwFedAvg(CwFedAvgParams(classwise_layers="all"), fed).init_state(torch.zeros(15))
    assert tuple(state["class_models"].shape) == (K, 15)


# ---------------------------------------------------------------- laws (property tests)

sizes = st.lists(st.integers(1, 50), min_size=2, max_size=6)


@settings(max_examples=40, deadline=None)
@given(
    sizes=sizes,
    proportions=st.lists(st.integers(0, 9), min_size=K, max_size=K).filter(lambda p: sum(p) > 0),
    layers=st.sampled_from(["output", "all", "top-2"]),
    seed=st.integers(0, 2**16),
)
def test_identical_class_proportions_give_fedavg(sizes, proportions, layers, seed) -> None:
    """With r_i = p for every client, q_ij = n_i / N: every held class model and every
    personalized model is FedAvg's model."""
    p = np.array(proportions, dtype=np.int64)
    counts = np.stack([p * m for m in sizes])  # the same proportions, n_i = m_i * sum(p)
    fed = federation(counts)
    algo = CwFedAvg(CwFedAvgParams(class_weights="true", classwise_layers=layers), fed)
    gen = torch.Generator().manual_seed(seed)
    initial = torch.randn(15, generator=gen)
    trained = {i: torch.randn(15, generator=gen) for i in range(len(sizes))}
    state, _ = run_round(algo, algo.init_state(initial), trained)

    fedavg = FedAvg(FedAvg.Params(), fed)
    fed_state, _ = run_round(fedavg, fedavg.init_state(initial), trained)
    for j in np.flatnonzero(p > 0):
        torch.testing.assert_close(
            state["class_models"][j], algo.classwise_part(fed_state["params"]), atol=1e-5, rtol=0
        )
    for client in range(len(sizes)):
        torch.testing.assert_close(
            personalized(algo, state, client, fed), fed_state["params"], atol=1e-5, rtol=0
        )


@settings(max_examples=40, deadline=None)
@given(
    assignment=st.lists(
        st.tuples(st.integers(0, K - 1), st.integers(1, 500)), min_size=1, max_size=8
    ),
    weights=st.sampled_from(["true", "estimated"]),
    seed=st.integers(0, 2**16),
)
def test_one_class_per_client_gives_per_class_fedavg(assignment, weights, seed) -> None:
    """With one class per client, class model j = FedAvg of class j's clients; classes nobody
    holds keep their previous model. Estimated r: heads whose only non-zero row is the class."""
    counts = np.zeros((len(assignment), K), dtype=np.int64)
    for i, (cls, n) in enumerate(assignment):
        counts[i, cls] = n
    fed = federation(counts)
    algo = CwFedAvg(CwFedAvgParams(class_weights=weights, classwise_layers="all"), fed)
    gen = torch.Generator().manual_seed(seed)
    initial = torch.randn(15, generator=gen)
    trained = {}
    for i, (cls, _) in enumerate(assignment):
        vector = torch.randn(15, generator=gen)
        head = vector[6:12].view(K, 2)
        head[[c for c in range(K) if c != cls]] = 0.0  # row norms one-hot on the client's class
        trained[i] = vector
    state, _ = run_round(algo, algo.init_state(initial), trained)
    for j in range(K):
        members = [i for i, (cls, _) in enumerate(assignment) if cls == j]
        if not members:
            torch.testing.assert_close(state["class_models"][j], initial)
            continue
        n = torch.tensor([float(assignment[i][1]) for i in members], dtype=torch.float64)
        stacked = torch.stack([trained[i].double() for i in members])
        expected = (n[:, None] * stacked).sum(0) / n.sum()
        torch.testing.assert_close(state["class_models"][j], expected.float(), atol=1e-5, rtol=0)


# ---------------------------------------------------------------- heatmap


def test_personalized_params_is_what_client_start_plans() -> None:
    fed = federation(COUNTS)
    for weights in ("estimated", "true"):
        for layers in ("output", "all"):
            algo = CwFedAvg(CwFedAvgParams(class_weights=weights, classwise_layers=layers), fed)
            state = algo.init_state(torch.randn(15))
            trained = {c: torch.randn(15) for c in range(3)}
            state, updates = run_round(algo, state, trained)
            for client in range(3):
                assert torch.equal(
                    algo.personalized_params(
                        state, updates[client].state, client_info(fed, client)
                    ),
                    personalized(algo, state, client, fed, updates[client].state),
                )


def test_row_norm_figure_from_the_final_state(tmp_path: Path) -> None:
    """Row norms of each client's personalized head beside its class proportions."""
    fed = federation(COUNTS)
    algo = CwFedAvg(CwFedAvgParams(class_weights="true", classwise_layers="output"), fed)
    state = algo.init_state(torch.zeros(15))
    # one class model per class: class j's head has row j of norm 1, the others 0
    state["class_models"] = torch.zeros(K, 9)
    for j in range(K):
        state["class_models"][j, 2 * j] = 1.0
    (figure,) = algo.figures(state, {}, round_idx=5)
    assert isinstance(figure, Figure) and figure.filename == ROW_NORMS_PNG
    norms, proportions = (panel.values for panel in figure.panels)
    p = COUNTS / COUNTS.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(norms, p / p.sum(axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(proportions, p)
    assert figure.title == "mean per-client corr = 1.000"
    (path,) = write_figures(tmp_path / "plots", [figure], "run: cwfedavg, round 5")
    assert path == tmp_path / "plots" / ROW_NORMS_PNG
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mean_row_correlation() -> None:
    p = np.array([[0.5, 0.5, 0.0], [0.0, 0.2, 0.8]])
    assert mean_row_correlation(p, p) == pytest.approx(1.0)
    assert mean_row_correlation(np.full((1, 3), 1 / 3), p[:1]) == 0.0
