"""SP-CACW after issue 26: batched (vmap) stacked gradient tasks, ``L_history`` and
``gamma=paper`` by hand, their bad values, when L is estimated, and the split of the
algorithm's files.

Unit tests need no data; the worker tests use the tiny mnist-5k federation of
``tests/test_spcacw.py`` (seconds each).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import federation
from test_spcacw import local_run, simulation

from fedsim.algorithms.spcacw import SPCACW, SPCACWParams
from fedsim.algorithms.spcacw_estimates import (
    TargetMoments,
    apply_step,
    lipschitz_due,
    quadratic_and_linear,
    regularizer_weight,
)
from fedsim.gradient_tasks import GradientTask
from fedsim.runtime.gradient_work import vmappable
from fedsim.runtime.worker import ClientWorker
from lightning_modules.registry import build_model

G1 = torch.tensor([[1.0, 0.0], [3.0, 1.0], [0.0, -2.0]])
G2 = torch.tensor([[2.0, 2.0], [2.0, 1.0], [4.0, 0.0]])


def tiny(**params) -> tuple[SPCACW, dict]:
    fed = federation([("w", (2,))], [4, 4, 4])
    fed.client_train_indices = [np.arange(4), np.arange(4, 8), np.arange(8, 12)]
    algo = SPCACW(SPCACWParams(targets=0, T_start=1, **params), fed)
    return algo, algo.init_state(torch.zeros(2))


# ------------------------------------------------------------------ the worker


def test_which_models_are_batched():
    image = {"in_channels": 1, "num_classes": 10, "image_size": 28}
    assert vmappable(build_model("mlp", **image))
    assert vmappable(build_model("fedavg_cnn", **image))
    assert not vmappable(build_model("resnet18", in_channels=3, num_classes=10, image_size=32))
    assert not vmappable(build_model("char_lstm", vocab_size=80, seq_len=80, num_classes=80))


@pytest.mark.parametrize("model", ["mlp", "fedavg_cnn"])
def test_a_batched_task_equals_its_entries_one_by_one_in_order(model):
    """Rows and sample counts mixed: each entry's gradient and loss are the plain loop's (up
    to float rounding), in the task's order; the Gram matrix is G G^T; the same task run
    twice, or on another worker, gives the same bits."""
    sim = simulation(f"model.name={model}")
    spec = dataclasses.replace(sim.worker_spec, num_threads=1)
    worker = ClientWorker(spec, sim.data)
    assert worker.vmappable
    stack = torch.stack([sim.initial_params, sim.initial_params * 0.9])
    train = [sim.data.clients[c].train for c in range(4)]
    at = [(1, train[0][:8]), (0, train[1][:8]), (1, train[2][:5]), (1, train[3][2:10])]
    task = GradientTask(0, stack="models", at=at, gram=True)
    (out,) = worker.run(0, {"models": stack}, [task]).outputs
    for j, (row, samples) in enumerate(at):
        single = worker.run(0, {}, [GradientTask(0, params=stack[row], indices=samples)])
        torch.testing.assert_close(out.gradient[j], single.outputs[0].gradient)
        assert out.losses[j] == pytest.approx(single.outputs[0].loss, rel=1e-5)
    exact = out.gradient.double() @ out.gradient.double().T
    scale = exact.diagonal().sqrt()  # errors relative to |g_i| |g_j|, the products' size
    assert float(((out.gram - exact).abs() / scale.outer(scale)).max()) < 1e-6
    again = ClientWorker(spec, sim.data).run(0, {"models": stack}, [task]).outputs[0]
    assert torch.equal(again.gradient, out.gradient) and torch.equal(again.gram, out.gram)
    assert again.losses == out.losses


def test_an_unbatchable_model_runs_entry_by_entry():
    sim = simulation("model.name=mlp")
    worker = ClientWorker(dataclasses.replace(sim.worker_spec, num_threads=1), sim.data)
    worker.vmappable = False  # as for a model with BatchNorm, dropout or an LSTM
    stack = sim.initial_params[None]
    at = [(0, sim.data.clients[1].train[:6]), (0, sim.data.clients[2].train[:6])]
    (out,) = worker.run(0, {"models": stack}, [GradientTask(1, stack="models", at=at)]).outputs
    batched = ClientWorker(dataclasses.replace(sim.worker_spec, num_threads=1), sim.data)
    (ref,) = batched.run(0, {"models": stack}, [GradientTask(1, stack="models", at=at)]).outputs
    torch.testing.assert_close(out.gradient, ref.gradient)
    assert out.gram is None


# ------------------------------------------------------------------ L_history, gamma


def test_per_step_l_history_adds_each_steps_l_eta():
    algo, state = tiny(L_history="per_step")
    assert "variance_gram" in state
    state["lipschitz"][0] = 2.0
    algo.apply_step(state, 0, G1, 0.1, TargetMoments())
    state["lipschitz"][0] = 3.0  # the next round's estimate
    algo.apply_step(state, 0, G2, 0.1, TargetMoments())
    g1, g2 = ((g @ g.T).double().numpy() for g in (G1, G2))
    np.testing.assert_allclose(state["variance_gram"][0], 0.1 * (2.0 * g1 + 3.0 * g2))
    np.testing.assert_allclose(state["grad_gram"][0], 0.1 * (g1 + g2))  # V itself as before
    q, c = algo.quadratic_and_linear(state, 0)
    assert c is None
    np.testing.assert_allclose(q, state["bias_gram"][0] + 0.1 * (2.0 * g1 + 3.0 * g2))
    current, current_state = tiny()
    current_state.update({k: np.copy(v) for k, v in state.items() if k != "variance_gram"})
    q_now, _ = current.quadratic_and_linear(current_state, 0)
    np.testing.assert_allclose(q_now, state["bias_gram"][0] + 3.0 * 0.1 * (g1 + g2))


def test_paper_gamma_is_one_over_8_plus_2_l_eta_times_g_max_squared():
    algo, state = tiny(reg=True, gamma="paper")
    moments = TargetMoments()
    state["lipschitz"][0] = 4.0
    for g in (G1, G2):
        algo.apply_step(state, 0, g, 0.1, moments)
    g_max = max(float(torch.linalg.vector_norm(g, dim=1).max()) for g in (G1, G2))
    assert state["g_max"][0] == pytest.approx(g_max)  # ||(4, 0)|| = 4
    expected = moments.variance_norm2() / ((8 + 2 * 4.0 * 0.1) * g_max**2)
    assert regularizer_weight(algo.params, state, 0, moments, 0.1) == pytest.approx(expected)
    constant, _ = tiny(reg=True, gamma=0.5)
    assert regularizer_weight(constant.params, state, 0, moments, 0.1) == pytest.approx(
        0.5 * moments.variance_norm2()
    )
    off, _ = tiny(gamma="paper")  # without reg there is no regularizer
    assert regularizer_weight(off.params, state, 0, moments, 0.1) == 0.0


def test_the_step_with_a_scratch_buffer_and_a_given_gram_is_the_same():
    algo, state = tiny()
    _, other = tiny()
    state["lipschitz"][0] = other["lipschitz"][0] = 1.0
    for g in (G1, G2):
        algo.apply_step(state, 0, g, 0.1, TargetMoments())
        apply_step(
            algo.params, other, 0, 0, g, 0.1, TargetMoments(),
            grads_gram=(g @ g.T).double().numpy(), scratch=torch.empty(3, 2),
        )  # fmt: skip
    for key, value in state.items():
        assert np.array_equal(np.asarray(other[key]), np.asarray(value)), key
    q, _ = quadratic_and_linear(algo.params, state, 0)
    assert np.allclose(q, q.T)


# ------------------------------------------------------------------ when L is estimated


def test_l_is_due_every_lipschitz_every_rounds_once_the_steps_reach_t_start():
    """Two targets, 13 steps a round, T_start 60, every 2 rounds: a target's first estimate
    comes in the round its steps reach 60, then in the even rounds."""
    params = SPCACWParams(targets=[0, 1], T_start=60, lipschitz_every=2)
    state = {"steps": np.array([0, 52]), "lipschitz": np.full(2, np.nan)}
    assert lipschitz_due(params, state, 0, [13, 13]) == [1]  # 0 + 13 < 60 <= 52 + 13
    state = {"steps": np.array([13, 65]), "lipschitz": np.array([np.nan, 5.0])}
    assert lipschitz_due(params, state, 1, [13, 13]) == []  # odd round; target 0 at 26
    assert lipschitz_due(params, state, 2, [13, 13]) == [1]
    state = {"steps": np.array([52, 78]), "lipschitz": np.array([np.nan, 5.0])}
    assert lipschitz_due(params, state, 3, [13, 13]) == [0]  # reaches 60 and has no L yet
    assert lipschitz_due(params, state, 3, [7, 13]) == []  # 52 + 7 < 60: not yet


def test_no_l_is_estimated_or_logged_before_the_round_that_reaches_t_start():
    sim = simulation("algorithm.targets=0")
    steps = -(-len(sim.federation.client_train_indices[0]) // 16)  # batches a round
    late = local_run(simulation("algorithm.targets=0", f"algorithm.T_start={steps + 1}"))
    first, second = late.history[0], late.history[1]
    assert "lipschitz" not in first and first["variance_term"] == 0.0, first
    assert second["lipschitz"] > 0 and second["variance_term"] > 0, second
    assert local_run(sim).history[0]["lipschitz"] > 0  # T_start 1: from round 0


def test_the_algorithm_files_stay_small():
    folder = Path(__file__).resolve().parents[1] / "fedsim" / "algorithms"
    for name in ("spcacw.py", "spcacw_estimates.py", "spcacw_exchange.py", "spcacw_report.py"):
        assert len((folder / name).read_text().splitlines()) <= 350, name
