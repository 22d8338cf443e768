"""SP-CACW (issue 15): the math by hand, the worker's gradient and curvature tasks, and
equalities of whole runs (Ray pool == local executor; targets side by side == each alone).

Unit tests need no data; the run tests use a tiny mnist-5k federation (400 digits, 4
relabelled clients in 2 clusters, 2 rounds) and the narrow FedAvgCNN (their claims are
equalities, not accuracies), seconds each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import NARROW_CNN, federation, one_line_error, run_local_and_ray, untimed

from fedsim.algorithms.simplex import (
    objective,
    project_simplex,
    projected_gradient_step,
    solve_leader,
)
from fedsim.algorithms.spcacw import (
    SPCACW,
    SPCACWParams,
    _Moments,
    beta_at,
    centred_update,
    draw_participation,
    target_list,
)
from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.gradient_tasks import CurvatureTask, GradientTask
from fedsim.runtime import curvature
from fedsim.runtime.curvature import hessian_top_eigenvalue, power_iteration
from fedsim.runtime.executor import LocalExecutor
from fedsim.runtime.worker import ClientWorker
from fedsim.simulation import Simulation

# ------------------------------------------------------------------ the simplex


def bisection_projection(v: np.ndarray) -> np.ndarray:
    """Reference: the threshold theta with sum max(v - theta, 0) = 1, found by bisection."""
    low, high = v.min() - 1.0, v.max()
    for _ in range(200):
        theta = (low + high) / 2
        low, high = (theta, high) if np.maximum(v - theta, 0).sum() > 1 else (low, theta)
    return np.maximum(v - (low + high) / 2, 0)


def test_simplex_projection_matches_a_bisection_reference_and_is_exact():
    rng = np.random.default_rng(0)
    for _ in range(300):
        v = rng.normal(size=rng.integers(1, 12)) * rng.choice([0.1, 1.0, 10.0])
        got = project_simplex(v)
        np.testing.assert_allclose(got, bisection_projection(v), atol=1e-9)
        assert got.min() >= 0 and abs(got.sum() - 1) < 1e-12
        # optimality: no feasible point on a grid of directions is closer to v
        for _ in range(5):
            other = project_simplex(got + rng.normal(size=len(v)) * 0.1)
            assert np.sum((got - v) ** 2) <= np.sum((other - v) ** 2) + 1e-12
    assert np.array_equal(project_simplex(np.array([3.0, 0.0, -1.0])), [1.0, 0.0, 0.0])
    assert np.array_equal(project_simplex(np.array([0.2, 0.2])), [0.5, 0.5])


def grid_minimum(q: np.ndarray, reg: float, step: float = 0.002) -> tuple[np.ndarray, float]:
    """Brute force over the M = 3 simplex on a grid."""
    n = int(round(1 / step))
    i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    keep = i + j <= n
    grid = np.stack([i[keep], j[keep], n - i[keep] - j[keep]], axis=1) / n
    values = np.einsum("ki,ij,kj->k", grid, q, grid) + reg * (grid**3).sum(axis=1)
    best = int(np.argmin(values))
    return grid[best], float(values[best])


def random_problem(rng: np.random.Generator, zeroed: bool) -> np.ndarray:
    """Q = B B^T + c G G^T like SP-CACW's, peer 0 the target (its bias row is zero)."""
    bias = rng.normal(size=(3, 5))
    bias[0] = 0
    if zeroed:
        bias[2] *= 8  # a far-off peer: its weight should be exactly 0
    grads = rng.normal(size=(3, 5))
    return bias @ bias.T + 0.3 * grads @ grads.T


@pytest.mark.parametrize("reg", [0.0, 0.7])
def test_ftal_and_pgd_reach_the_grid_minimum_at_m3(reg):
    rng = np.random.default_rng(1)
    for trial in range(6):
        q = random_problem(rng, zeroed=trial % 2 == 0)
        grid, grid_value = grid_minimum(q, reg)
        start = np.array([1.0, 0.0, 0.0])
        leader = solve_leader(q, reg, start)
        assert objective(q, reg, leader) <= grid_value + 1e-9
        np.testing.assert_allclose(leader, grid, atol=0.01)
        alpha = start
        for _ in range(3000):  # PGD: one step per update, on a fixed objective
            alpha = projected_gradient_step(q, reg, alpha)
        assert objective(q, reg, alpha) <= grid_value + 1e-6
        np.testing.assert_allclose(alpha, leader, atol=2e-3)
        if trial % 2 == 0 and grid[2] == 0:
            assert leader[2] == 0.0  # exactly zero, not 1e-17


@pytest.mark.parametrize("reg", [0.0, 0.7])
def test_ftal_and_pgd_with_a_linear_term_reach_the_grid_minimum_at_m3(reg):
    """bias_term=linear: F = c^T alpha + alpha^T Q alpha (+ reg sum alpha^3), c = diag(B B^T)."""
    rng = np.random.default_rng(5)
    for trial in range(6):
        bias = rng.normal(size=(3, 5))
        bias[0] = 0
        if trial % 2 == 0:
            bias[2] *= 3  # far off: under the linear bias term its weight is exactly 0
        grads = rng.normal(size=(3, 5))
        q, c = 0.3 * grads @ grads.T, (bias**2).sum(axis=1)
        n = 500
        i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        keep = i + j <= n
        grid = np.stack([i[keep], j[keep], n - i[keep] - j[keep]], axis=1) / n
        values = grid @ c + np.einsum("ki,ij,kj->k", grid, q, grid) + reg * (grid**3).sum(axis=1)
        best, best_value = grid[int(np.argmin(values))], float(values.min())
        start = np.array([1.0, 0.0, 0.0])
        leader = solve_leader(q, reg, start, linear=c)
        assert objective(q, reg, leader, c) <= best_value + 1e-9
        np.testing.assert_allclose(leader, best, atol=0.01)
        alpha = start
        for _ in range(3000):
            alpha = projected_gradient_step(q, reg, alpha, linear=c)
        np.testing.assert_allclose(alpha, leader, atol=2e-3)
        if best[2] == 0:
            assert leader[2] == 0.0
    # no curvature: all weight on the smallest c
    flat = np.zeros((3, 3))
    assert solve_leader(flat, 0.0, start, linear=np.array([2.0, 1.0, 3.0])).tolist() == [0, 1, 0]


# ------------------------------------------------------------------ the estimators


def tiny_algorithm(**params) -> SPCACW:
    fed = federation([("w", (2,))], [4, 4, 4])
    fed.client_train_indices = [np.arange(4), np.arange(4, 8), np.arange(8, 12)]
    return SPCACW(SPCACWParams(**params), fed)


def test_ema_bias_and_running_grams_by_hand():
    algo = tiny_algorithm(targets=0, beta="1/t", T_start=2, reg=True)  # reg: moments kept
    state = algo.init_state(torch.zeros(2))
    g1 = torch.tensor([[1.0, 0.0], [3.0, 1.0], [0.0, -2.0]])
    g2 = torch.tensor([[2.0, 2.0], [2.0, 1.0], [4.0, 0.0]])
    moments = _Moments()
    algo.apply_step(state, 0, g1, 0.1, moments)
    # alpha one-hot on the target: w = -0.1 g1[0]
    torch.testing.assert_close(state["models"][0], torch.tensor([-0.1, 0.0]))
    b1 = (g1 - g1[0]).double()  # beta_1 = 1: b^_1 = b~_1
    torch.testing.assert_close(state["bias"][0].double(), b1)
    assert state["terms"][0] == 0 and not state["bias_gram"].any()  # t=1 < T_start
    state["alpha"][0] = [0.5, 0.25, 0.25]
    algo.apply_step(state, 0, g2, 0.1, moments)
    b2 = 0.5 * b1 + 0.5 * (g2 - g2[0]).double()  # beta_2 = 1/2
    torch.testing.assert_close(state["bias"][0].double(), b2)
    np.testing.assert_allclose(state["bias_gram"][0], (b2 @ b2.T).numpy())
    np.testing.assert_allclose(state["grad_gram"][0], 0.1 * (g2 @ g2.T).double().numpy())
    expected = torch.tensor([-0.1, 0.0]) - 0.1 * (0.5 * g2[0] + 0.25 * g2[1] + 0.25 * g2[2])
    torch.testing.assert_close(state["models"][0], expected)
    # the target's gradient variance over the round: g^(0) = (1, 0), (2, 2)
    var = np.array([0.25, 1.0])
    assert moments.variance_norm2() == pytest.approx(float((var**2).sum()))
    plain = tiny_algorithm(targets=0)  # without reg nothing reads them: none are kept
    unused = _Moments()
    plain.apply_step(plain.init_state(torch.zeros(2)), 0, g1, 0.1, unused)
    assert unused.count == 0
    assert beta_at(0.3, 7) == 0.3 and beta_at("1/t", 4) == 0.25


def test_centred_variance_gram_by_hand():
    """variance_term=centred, beta 1/t: m_1 = g_1; r_t = g_t - m_{t-1}, term (1 - 1/t) r r^T."""
    algo = tiny_algorithm(targets=0, beta="1/t", T_start=1, variance_term="centred")
    state = algo.init_state(torch.zeros(2))
    g1 = torch.tensor([[1.0, 0.0], [3.0, 1.0], [0.0, -2.0]])
    g2 = torch.tensor([[2.0, 2.0], [2.0, 1.0], [4.0, 0.0]])
    g3 = torch.tensor([[0.0, 1.0], [1.0, 1.0], [2.0, 2.0]])
    moments = _Moments()
    algo.apply_step(state, 0, g1, 0.1, moments)
    torch.testing.assert_close(state["grad_mean"][0], g1)  # m_1 = g_1, nothing added
    assert not state["grad_gram"].any() and state["terms"][0] == 1
    algo.apply_step(state, 0, g2, 0.1, moments)
    # r_2 = g2 - g1 = [(1, 2), (-1, 0), (4, 2)], weight 1/2
    np.testing.assert_allclose(
        state["grad_gram"][0], 0.1 * np.array([[2.5, -0.5, 4], [-0.5, 0.5, -2], [4, -2, 10]])
    )
    algo.apply_step(state, 0, g3, 0.1, moments)
    # r_3 = g3 - (g1 + g2) / 2 = [(-1.5, 0), (-1.5, 0), (0, 3)], weight 2/3; summed, the
    # centred sums of squares of the three gradients around their mean (Welford)
    torch.testing.assert_close(state["grad_mean"][0], torch.tensor([[1.0, 1], [2, 1], [2, 0]]))
    np.testing.assert_allclose(
        state["grad_gram"][0], 0.1 * np.array([[4.0, 1, 4], [1, 2, -2], [4, -2, 16]])
    )
    # the bias Gram is the raw variant's: only the second quadratic changes
    raw = tiny_algorithm(targets=0, beta="1/t", T_start=1)
    raw_state = raw.init_state(torch.zeros(2))
    for g in (g1, g2, g3):
        raw.apply_step(raw_state, 0, g, 0.1, _Moments())
    np.testing.assert_allclose(state["bias_gram"][0], raw_state["bias_gram"][0])
    assert "grad_mean" not in raw_state  # raw keeps no running means
    raw_gram = 0.1 * sum((g @ g.T).double().numpy() for g in (g1, g2, g3))
    np.testing.assert_allclose(raw_state["grad_gram"][0], raw_gram)


@pytest.mark.parametrize("beta, t_start", [("1/t", 1), ("1/t", 3), (0.3, 1), (0.3, 4)])
def test_centred_gram_equals_the_explicit_formula(beta, t_start):
    """beta 1/t, T_start 1: eta sum_t (G_t - Gbar)(G_t - Gbar)^T over the whole history;
    otherwise eta sum_{t >= max(2, T_start)} (1 - beta_t) (G_t - m_{t-1})(G_t - m_{t-1})^T
    with m_{t-1} written out as the weighted sum of G_1..G_{t-1}."""
    rng = np.random.default_rng(4)
    steps, m, p, eta = 7, 4, 50, 0.05
    history = rng.normal(size=(steps, m, p)) + rng.normal(size=(1, m, p))
    fed = federation([("w", (p,))], [4] * m)
    fed.client_train_indices = [np.arange(4) + 4 * i for i in range(m)]
    algo = SPCACW(SPCACWParams(targets=0, beta=beta, T_start=t_start, variance_term="centred"), fed)
    state = algo.init_state(torch.zeros(p))
    for g in history:
        algo.apply_step(state, 0, torch.tensor(g, dtype=torch.float32), eta, _Moments())
    g32 = history.astype(np.float32).astype(np.float64)  # what the algorithm saw
    expected = np.zeros((m, m))
    if beta == "1/t" and t_start == 1:
        deviation = g32 - g32.mean(axis=0)
        expected = eta * np.einsum("tip,tjp->ij", deviation, deviation)
    else:
        for t in range(max(2, t_start), steps + 1):
            rate = [beta_at(beta, s) for s in range(1, t + 1)]
            # m_{t-1} = sum_s c_s G_s: c_1 = prod_{u=2}^{t-1} (1 - rate_u), c_s = rate_s prod_{u>s}
            mean = np.zeros((m, p))
            for s in range(1, t):
                weight = 1.0 if s == 1 else rate[s - 1]
                for u in range(s + 1, t):
                    weight *= 1 - rate[u - 1]
                mean += weight * g32[s - 1]
            residual = g32[t - 1] - mean
            expected += eta * (1 - rate[t - 1]) * residual @ residual.T
    np.testing.assert_allclose(state["grad_gram"][0], expected, rtol=1e-4, atol=1e-6)
    assert np.allclose(state["grad_gram"][0], state["grad_gram"][0].T)
    assert np.linalg.eigvalsh(state["grad_gram"][0]).min() > -1e-6  # PSD


def test_linear_bias_term_uses_the_running_squared_norms():
    algo = tiny_algorithm(targets=0, T_start=1, bias_term="linear", L=2.0)
    state = algo.init_state(torch.zeros(2))
    g1 = torch.tensor([[1.0, 0.0], [3.0, 1.0], [0.0, -2.0]])
    algo.apply_step(state, 0, g1, 0.1, _Moments())
    state["lipschitz"][:] = 2.0  # what refresh_lipschitz sets from the fixed L
    q, c = algo.quadratic_and_linear(state, 0)
    # b^_1 = g1 - g1[0] = [(0, 0), (2, 1), (-1, -2)]: ||b^||^2 = 0, 5, 5
    np.testing.assert_allclose(c, [0.0, 5.0, 5.0])
    np.testing.assert_allclose(q, 2.0 * 0.1 * (g1 @ g1.T).double().numpy())
    quadratic = tiny_algorithm(targets=0, T_start=1, L=2.0)
    q2, c2 = quadratic.quadratic_and_linear(state, 0)
    assert c2 is None and np.allclose(q2, state["bias_gram"][0] + q)


def test_centred_update_is_an_ema_with_innovations():
    mean = torch.tensor([[1.0, 1.0]])
    residual, weight = centred_update(mean, torch.tensor([[3.0, 0.0]]), 0.25, first=False)
    torch.testing.assert_close(residual, torch.tensor([[2.0, -1.0]]))
    torch.testing.assert_close(mean, torch.tensor([[1.5, 0.75]]))
    assert weight == 0.75
    _, weight = centred_update(mean, torch.tensor([[9.0, 9.0]]), 0.25, first=True)
    assert weight == 0.0 and mean.tolist() == [[9.0, 9.0]]


def test_partial_participation_rescaling_is_unbiased():
    p, g = 0.3, torch.tensor([1.0, -2.0])
    algo = tiny_algorithm(targets=0, participation=p)
    total, draws = torch.zeros(2), 4000
    for step in range(draws):
        joined = draw_participation([0, 0, step, 0, 1, 12], p)
        peers = [0, 1] if joined else [0]
        stack = torch.stack([torch.zeros(2), g])[: len(peers)]
        output = SimpleNamespace(client=0, tag=(0, peers), gradient=stack, gram=stack @ stack.T)
        grads, gram = algo.gather(output)
        assert grads.shape == (3, 2) and not grads[2].any()  # peer 2 never joins here
        np.testing.assert_allclose(gram, (grads @ grads.T).double().numpy(), rtol=1e-6)
        total += grads[1]
    mean = total / draws
    # E[z g / p] = g: within 4 standard errors of the Bernoulli mean
    se = float(np.sqrt((1 - p) / (p * draws)))
    assert torch.allclose(mean, g, atol=4 * se * 2.0)
    assert not torch.equal(mean, g)  # it really was random


def test_targets_key_and_bad_values():
    assert target_list("all", 3) == [0, 1, 2]
    assert target_list(1, 3) == [1] and target_list([2, 0], 3) == [2, 0]
    with pytest.raises(ConfigError, match="algorithm.targets"):
        tiny_algorithm(targets=3)


# ------------------------------------------------------------------ curvature


def test_power_iteration_finds_the_top_eigenvalue_of_a_quadratic_model():
    rng = np.random.default_rng(2)
    basis, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    eigenvalues = np.array([-0.5, 0.1, 0.3, 1.0, 2.0, 7.0])
    h = torch.tensor(basis @ np.diag(eigenvalues) @ basis.T, dtype=torch.float64)
    w = torch.zeros(6, dtype=torch.float64, requires_grad=True)

    def hvp(v):  # double backprop through f(w) = w^T H w / 2
        (grad,) = torch.autograd.grad(0.5 * w @ h @ w, [w], create_graph=True)
        return list(torch.autograd.grad(grad @ v[0], [w]))

    got = power_iteration(
        hvp, [w.shape], 200, torch.Generator().manual_seed(0), dtype=torch.float64
    )
    assert got == pytest.approx(7.0, rel=1e-3)


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 4)

    def forward(self, x):
        return self.fc(x)


def test_hvp_power_iteration_matches_the_exact_hessian_of_a_small_model():
    torch.manual_seed(0)
    model = Linear()
    x, y = torch.randn(20, 3), torch.randint(0, 4, (20,))
    data = SimpleNamespace(batch=lambda idx: (x[idx], y[idx]))
    got = hessian_top_eigenvalue(
        model,
        data,
        np.arange(20),
        batch_size=7,  # chunks: the HVP is summed over them
        iterations=500,
        generator=torch.Generator().manual_seed(1),
    )
    names = [n for n, _ in model.named_parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    shapes = [p.shape for p in model.parameters()]

    def loss(vector):
        parts, offset = {}, 0
        for name, shape in zip(names, shapes, strict=True):
            numel = int(np.prod(shape))
            parts[name] = vector[offset : offset + numel].view(shape)
            offset += numel
        logits = torch.func.functional_call(model, parts, (x,))
        return torch.nn.functional.cross_entropy(logits, y)

    hessian = torch.autograd.functional.hessian(loss, flat)
    exact = torch.linalg.eigvalsh(hessian)
    top = float(exact[exact.abs().argmax()])
    assert got == pytest.approx(top, rel=2e-3)


def test_kept_gradient_graphs_give_the_rebuilt_graphs_eigenvalue_to_the_bit(monkeypatch):
    """Up to KEEP_GRAPHS_SAMPLES the chunks' gradient graphs are reused by every product;
    above it they are rebuilt each time. Same operations on the same values: same bits."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    x, y = torch.randn(40, 3), torch.randint(0, 4, (40,))
    data = SimpleNamespace(batch=lambda idx: (x[idx], y[idx]))

    def eigenvalue() -> float:
        return hessian_top_eigenvalue(model, data, np.arange(40), batch_size=7, iterations=30,
                                      generator=torch.Generator().manual_seed(1))  # fmt: skip

    kept = eigenvalue()
    monkeypatch.setattr(curvature, "KEEP_GRAPHS_SAMPLES", 0)
    assert eigenvalue() == kept


# ------------------------------------------------------------------ real federation

BASE = [
    "seed=3",
    "rounds=2",
    "data.name=mnist-5k",
    "data.max_samples=400",
    "data.num_clients=4",
    "data.partition.name=relabel",
    "data.partition.clusters=2",
    "client.lr=0.05",
    "client.batch_size=16",
    "checkpoint_every=0",
    "runtime.executor=local",
    "runtime.device=cpu",
    "algorithm.name=spcacw",
    "algorithm.lipschitz_samples=32",
    "algorithm.lipschitz_iterations=4",
]


def with_net(overrides: Sequence[str]) -> list[str]:
    """BASE + ``overrides`` on the narrow FedAvgCNN, or on the MLP they name (no channels)."""
    narrow = [] if "model.name=mlp" in overrides else list(NARROW_CNN)
    return [*BASE, *narrow, *overrides]


def simulation(*overrides: str) -> Simulation:
    sim = Simulation(load_config(None, with_net(overrides)))
    sim.worker_spec.num_threads = 1
    return sim


def local_run(sim: Simulation):
    torch.set_num_threads(1)
    with LocalExecutor(sim.worker_spec, sim.data) as executor:
        return sim.run(executor)


def test_a_stacked_gradient_task_equals_one_task_per_model():
    sim = simulation()
    worker = ClientWorker(dataclasses.replace(sim.worker_spec, num_threads=1), sim.data)
    stack = torch.stack([sim.initial_params, sim.initial_params * 0.9])
    own = sim.data.clients[1].train
    at = [(1, own[:8]), (0, own[3:9])]
    stacked = worker.run(0, {"models": stack}, [GradientTask(1, stack="models", at=at)])
    (out,) = stacked.outputs
    assert out.gradient.shape == (2, stack.shape[1]) and len(out.losses) == 2
    for j, (row, samples) in enumerate(at):
        single = worker.run(0, {}, [GradientTask(1, params=stack[row], indices=samples)])
        torch.testing.assert_close(out.gradient[j], single.outputs[0].gradient)
        assert out.losses[j] == pytest.approx(single.outputs[0].loss)
    curvature = worker.run(0, {}, [CurvatureTask(1, params=stack[0], num_samples=16)])
    assert curvature.outputs[0].eigenvalue > 0


def test_targets_side_by_side_equal_each_run_alone():
    both = local_run(simulation("algorithm.targets=[0,3]", "algorithm.participation=0.5"))
    for k, target in enumerate((0, 3)):
        alone = local_run(simulation(f"algorithm.targets={target}", "algorithm.participation=0.5"))
        # a target's task holds only its own peers' minibatches: the same bits either way
        assert torch.equal(both.state["models"][k], alone.state["models"][0])
        assert np.array_equal(both.state["alpha"][k], alone.state["alpha"][0])
        assert np.array_equal(both.state["lipschitz"][k], alone.state["lipschitz"][0])
    # the round records: targets only are evaluated; alpha per target, L, terms logged
    first = both.history[0]
    assert first["num_trained"] == 2 and len(first["alpha"]) == 2
    assert {"alpha_zero", "lipschitz", "bias_term", "variance_term"} <= set(first)
    assert "alpha/3/1" in first and first["bytes_down"] > 0


def test_a_centred_run_logs_its_terms():
    run = local_run(
        simulation("rounds=1", "algorithm.targets=[0,3]", "algorithm.variance_term=centred")
    )
    assert run.state["grad_mean"].shape == run.state["bias"].shape
    first = run.history[0]
    assert np.isfinite(first["variance_term"]) and first["variance_term"] >= 0
    assert np.isfinite(first["acc_mean"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        [],
        # the MLP, standard pixels, L eta per step and the paper's gamma (issue 26)
        [
            "model.name=mlp",
            "data.normalize=standard",
            "algorithm.L_history=per_step",
            "algorithm.reg=true",
            "algorithm.gamma=paper",
        ],
    ],
)
def test_ray_pool_equals_the_local_executor(ray_cluster, ray_pool, extra):
    overrides = ["rounds=1", "algorithm.targets=[0,3]", "algorithm.participation=0.7", *extra]
    local, pooled = run_local_and_ray(load_config(None, with_net(overrides)), ray_pool)
    for key, value in local.state.items():  # the same bits, every entry of the state
        if isinstance(value, torch.Tensor):
            assert torch.equal(pooled.state[key], value), key
        else:
            assert np.array_equal(pooled.state[key], value), key
    assert untimed(pooled.history) == untimed(local.history)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "override, key",
    [
        ("algorithm.targets=9", "algorithm.targets"),
        ("algorithm.targets=[0,0]", "algorithm.targets"),
        ("algorithm.targets=-1", "algorithm.targets"),
        ("algorithm.participation=0", "algorithm.participation"),
        ("algorithm.participation=1.5", "algorithm.participation"),
        ("algorithm.solver=adam", "algorithm.solver"),
        ("algorithm.beta=0", "algorithm.beta"),
        ("algorithm.beta=1.5", "algorithm.beta"),
        ("algorithm.beta=1/s", "algorithm.beta"),
        ("algorithm.T_start=0", "algorithm.T_start"),
        ("algorithm.steps_per_round=0", "algorithm.steps_per_round"),
        ("algorithm.variance_term=centered", "algorithm.variance_term"),
        ("algorithm.bias_term=cubic", "algorithm.bias_term"),
        ("algorithm.L_history=always", "algorithm.L_history"),
        ("algorithm.gamma=papers", "algorithm.gamma"),
        ("algorithm.gamma=-1", "algorithm.gamma"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_run_folder(override, key, capsys, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("algorithm:\n  name: spcacw\n")
    argv = ["run", str(config), "--check", "runtime.executor=local", "data.num_clients=4"]
    argv += ["rounds=1", override]
    line = one_line_error(argv, capsys, tmp_path)
    assert f"{key}=" in line, line
