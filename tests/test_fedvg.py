"""FedVG: scores, weights and granularities by hand; the validation set; the real probe."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from helpers import NARROW_CNN, FixedProbe, federation, lent_ray_executor, run_round

from fedsim.algorithms.base import ClientInfo, FederationInfo
from fedsim.algorithms.fedprox import FedProx
from fedsim.algorithms.fedvg import (
    FedVG,
    ValidationSplit,
    build_validation,
    inverse_weights,
    tensor_norm,
    validation_gradient,
)
from fedsim.algorithms.scaffold import Scaffold
from fedsim.client_work import ClientWork, OptimizerSettings
from fedsim.config import load_config
from fedsim.data.build import build_federated_data
from fedsim.data.datasets import ImageDataset
from fedsim.data.federated import FederatedData
from fedsim.errors import ConfigError
from fedsim.round_context import static_context
from fedsim.run_plan import ModelBuild
from fedsim.runtime.executor import LocalExecutor
from fedsim.runtime.factory import make_executor
from fedsim.runtime.worker import ClientWorker, WorkerProbe, WorkerSpec
from fedsim.simulation import Simulation, cached_dataset
from lightning_modules.registry import build_model

# ------------------------------------------------------------------ crafted probes


class QuadraticProbe:
    """Validation loss 0.5 ||theta - target||^2 per sample: its gradient is theta - target.

    A model nearer the target sits where the validation loss is flatter."""

    def __init__(self, target: torch.Tensor):
        self.target = target
        self.calls: list[int] = []

    def gradient(self, params, indices=None):
        self.calls.append(len(indices))
        diff = params - self.target
        return diff.clone(), float(0.5 * diff.pow(2).sum())


SIZES = [10, 30]  # two clients


def fedvg(fed: FederationInfo, val_size: int = 40, cls=FedVG, **params):
    algo = cls(cls.Params(**params), fed)
    algo.weighting.scorer.validation = ValidationSplit(np.arange(val_size), train_subsets={})
    return algo


def aggregate(algo, models: list[torch.Tensor], probes: list) -> torch.Tensor:
    """Both clients through the seam, on two workers, from zero; the new server model."""
    state = algo.init_state(torch.zeros_like(models[0]))
    return run_round(algo, state, models, probes=probes, workers=((0,), (1,)))[0]["params"]


# ------------------------------------------------------------------ weights by hand


def test_inverse_weights_by_hand():
    assert inverse_weights([1.0, 2.0, 4.0], eps=0) == pytest.approx([4 / 7, 2 / 7, 1 / 7])
    assert sum(inverse_weights([3.0, 0.5, 7.0])) == pytest.approx(1.0)


def test_flatter_client_gets_more_weight():
    """Client 0 lands near the validation optimum, client 1 far: hand-computed FedVG mean."""
    target = torch.tensor([1.0, -1.0, 2.0, 0.0])
    near = target + torch.tensor([0.1, 0.0, 0.0, -0.1])
    far = target + torch.tensor([1.0, -1.0, 0.5, 0.0])
    probe = QuadraticProbe(target)
    algo = fedvg(federation([("w", (4,))], SIZES), val_size=40)
    new = aggregate(algo, [near, far], [probe, probe])
    assert probe.calls == [32, 8, 32, 8]  # batches of 32, no shuffle, the last one partial
    # official gradient: sum over batches of (batch size x mean gradient) / 2 batches = 20 (θ - θ*)
    s_near, s_far = 20 * 0.2, 20 * 2.5  # L1 norms
    w_near = (1 / (s_near + 1e-8)) / (1 / (s_near + 1e-8) + 1 / (s_far + 1e-8))
    assert w_near == pytest.approx(50 / 54)
    assert torch.allclose(new, w_near * near + (1 - w_near) * far, atol=1e-6)
    # FedAvg would have weighted them 10 : 30, i.e. given the far client 3/4
    assert w_near > 0.9


@pytest.mark.parametrize(
    ("norm", "weight_a"),
    [
        (1, (1 / 2) / (1 / 2 + 1 / 1.5)),  # ||G_A||_1 = 2, ||G_B||_1 = 1.5
        (2, (1 / math.sqrt(2)) / (1 / math.sqrt(2) + 1 / 1.5)),  # Frobenius
        ("spectral", (1 / 1) / (1 / 1 + 1 / 1.5)),  # sigma_1(G_A) = 1, sigma_1(G_B) = 1.5
    ],
)
def test_l1_l2_spectral_give_different_weights(norm, weight_a):
    grad_a = torch.tensor([1.0, 0.0, 0.0, 1.0])  # [[1, 0], [0, 1]]
    grad_b = torch.tensor([1.5, 0.0, 0.0, 0.0])  # [[1.5, 0], [0, 0]]
    algo = fedvg(federation([("w", (2, 2))], SIZES), val_size=32, norm=norm)
    new = aggregate(algo, [torch.ones(4), torch.zeros(4)], [FixedProbe(grad_a), FixedProbe(grad_b)])
    # theta_A = 1, theta_B = 0: the mean is w_A (scores are 32 x the norms: 1 batch of 32)
    assert torch.allclose(new, torch.full((4,), weight_a), atol=1e-6)


def test_the_three_norms_rank_clients_differently():
    grad_a, grad_b = torch.eye(2), torch.tensor([[1.5, 0.0], [0.0, 0.0]])
    assert tensor_norm(grad_a, "1") > tensor_norm(grad_b, "1")  # L1 prefers B
    assert tensor_norm(grad_a, "2") < tensor_norm(grad_b, "2")  # L2 prefers A
    assert tensor_norm(grad_a, "spectral") == pytest.approx(1.0)
    conv = torch.zeros(2, 1, 2, 2)
    conv[0, 0, 0, 0], conv[1, 0, 1, 1] = 3.0, 4.0
    assert tensor_norm(conv, "spectral") == pytest.approx(4.0)  # rows = output channels
    assert tensor_norm(torch.tensor([3.0, 4.0]), "spectral") == pytest.approx(5.0)


GRADS = {  # client -> gradient on tensors a (2,), b (2,), c (1,)
    0: torch.tensor([0.1, 0.0, 1.0, 1.0, 0.5]),
    1: torch.tensor([1.0, 0.0, 0.1, 0.0, 0.5]),
}


@pytest.mark.parametrize(
    ("granularity", "expected"),
    [
        # one weight: s_0 = 0.1 + 2 + 0.5 = 2.6, s_1 = 1 + 0.1 + 0.5 = 1.6
        ("model", [(1 / 2.6) / (1 / 2.6 + 1 / 1.6)] * 5),
        # per tensor: a 0.1 vs 1, b 2 vs 0.1, c 0.5 vs 0.5
        ("layer", [10 / 11] * 2 + [0.5 / 10.5] * 2 + [0.5]),
        # blocks body = {a, b}: 2.1 vs 1.1; head = {c}
        ("block", [(1 / 2.1) / (1 / 2.1 + 1 / 1.1)] * 4 + [0.5]),
    ],
)
def test_granularities_by_hand(granularity, expected):
    blocks = {"body": ["a", "b"], "head": ["c"]}
    fed = federation([("a", (2,)), ("b", (2,)), ("c", (1,))], SIZES, blocks=blocks)
    algo = fedvg(fed, val_size=32, granularity=granularity)
    probes = [FixedProbe(GRADS[0]), FixedProbe(GRADS[1])]
    new = aggregate(algo, [torch.ones(5), torch.zeros(5)], probes)
    assert torch.allclose(new, torch.tensor(expected), atol=1e-6)


def test_avg_mode_averages_with_sample_weights():
    algo = fedvg(federation([("w", (4,))], SIZES), val_size=32, weighting="avg")
    probes = [FixedProbe(torch.full((4,), 0.25)), FixedProbe(torch.full((4,), 1.0))]
    new = aggregate(algo, [torch.ones(4), torch.zeros(4)], probes)
    w_vg = (1 / 1) / (1 / 1 + 1 / 4)  # L1: 1 vs 4 (x 32, which cancels)
    assert torch.allclose(new, torch.full((4,), (w_vg + 10 / 40) / 2), atol=1e-6)


def test_fedvg_plugs_into_fedprox_and_scaffold():
    fed = federation([("w", (4,))], SIZES)
    probes = [FixedProbe(torch.full((4,), 0.25)), FixedProbe(torch.full((4,), 1.0))]
    w_vg = 0.8
    prox = fedvg(fed, val_size=32, cls=FedProx, mu=0.01, weighting="fedvg")
    assert torch.allclose(
        aggregate(prox, [torch.ones(4), torch.zeros(4)], probes), 0.8 * torch.ones(4)
    )
    scaffold = fedvg(fed, val_size=32, cls=Scaffold, weighting="fedvg", global_lr=0.5)
    # x += eta_g sum_k w_k (y_k - x) from x = 0
    new = aggregate(scaffold, [torch.ones(4), torch.zeros(4)], probes)
    assert torch.allclose(new, torch.full((4,), 0.5 * w_vg), atol=1e-6)


def test_weighting_config_is_validated():
    for override, match in [
        ("algorithm.norm=3", r"algorithm\.norm=3: allowed: 1, 2, spectral"),
        ("algorithm.granularity=tensor", r"algorithm\.granularity='tensor': allowed"),
        ("algorithm.weighting=median", r"algorithm\.weighting='median': allowed"),
        ("algorithm.val_ratio=1.5", r"algorithm\.val_ratio=1\.5: must be in \(0, 1\)"),
        ("algorithm.val_dataset=imagenet", r"algorithm\.val_dataset='imagenet': allowed"),
        ("algorithm.val_imbalance=0", r"algorithm\.val_imbalance=0\.0: must be in \(0, 1\]"),
    ]:
        with pytest.raises(ConfigError, match=match):
            load_config(None, ["algorithm.name=fedvg", override])
    params = load_config(None, ["algorithm.name=fedvg", "algorithm.norm=spectral"]).algorithm.params
    assert params.norm == "spectral" and params.weighting == "fedvg"


# ------------------------------------------------------------------ the validation set


@pytest.fixture(scope="module")
def data() -> FederatedData:
    return build_federated_data(cached_dataset("mnist-5k", "data", False), 10, "dirichlet", seed=3)


def loader(name: str) -> ImageDataset:
    raise AssertionError(f"no dataset should be loaded, asked for {name}")


def test_held_out_split_is_united_and_clients_train_on_the_rest(data):
    params = FedVG.Params()
    same, split = build_validation(params, data, loader, seed=0)
    assert same is data
    held = []
    for c, client in enumerate(data.clients):
        rest = split.train_subsets[c]
        n_val = len(client.train) - len(rest)
        assert n_val == math.floor(0.1 * len(client.train))
        assert np.isin(rest, client.train).all()
        held.append(np.setdiff1d(client.train, rest))
    assert np.array_equal(np.sort(np.concatenate(held)), split.indices)
    again = build_validation(params, data, loader, seed=0)[1]
    assert np.array_equal(again.indices, split.indices)
    assert not np.array_equal(
        build_validation(params, data, loader, seed=1)[1].indices, split.indices
    )


def test_imbalanced_and_capped_validation_set(data):
    pool = build_validation(FedVG.Params(), data, loader, 0)[1].indices
    split = build_validation(FedVG.Params(val_imbalance=0.5), data, loader, 0)[1]
    counts = np.bincount(data.dataset.labels[split.indices], minlength=10)
    shares = 0.5 ** np.arange(10) / (0.5 ** np.arange(10)).sum()
    available = np.bincount(data.dataset.labels[pool], minlength=10)
    assert (
        counts.tolist() == np.minimum((shares * (len(pool) // 2)).astype(int), available).tolist()
    )
    capped = build_validation(FedVG.Params(val_samples=50), data, loader, 0)[1]
    assert len(capped.indices) == 50 and np.isin(capped.indices, pool).all()


def test_external_validation_set_becomes_server_only_samples(data):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, size=(500, 1, 28, 28), dtype=np.uint8)
    external = ImageDataset("public", images, rng.integers(0, 10, 500), 10)
    params = FedVG.Params(val_dataset="mnist", val_samples=100)
    new, split = build_validation(params, data, lambda name: external, 0)
    n = len(data.dataset)
    assert len(new.dataset) == n + round(0.1 * data.train_sizes().sum())  # val_ratio x train
    assert len(split.indices) == 100 and (split.indices >= n).all()
    assert split.train_subsets == {}  # clients keep their whole train split
    assert new.clients is data.clients and len(data.dataset) == n  # the original is untouched
    assert new.partition_summary()["num_samples"] == n
    x, y = new.batch(split.indices[:3])
    assert x.shape == (3, 1, 28, 28) and y.max() < 10
    colour = ImageDataset("colour", np.zeros((5, 3, 32, 32), np.uint8), np.zeros(5, np.int64), 10)
    with pytest.raises(ConfigError, match=r"algorithm\.val_dataset='mnist': .*same shape"):
        build_validation(params, data, lambda name: colour, 0)
    many = ImageDataset("many", images[:5], np.array([0, 1, 2, 50, 99]), 100)
    with pytest.raises(ConfigError, match=r"labels up to 99, but mnist-5k has only 10"):
        build_validation(FedVG.Params(val_dataset="mnist"), data, lambda name: many, 0)


# ------------------------------------------------------------------ the real probe

CNN = {"in_channels": 1, "num_classes": 10, "image_size": 28}


def test_validation_gradient_on_the_worker_matches_the_official_loop(data):
    cfg = load_config(None, ["client.batch_size=10", "client.eval_batch_size=500", "seed=0"])
    client = ClientWork.from_config(cfg, OptimizerSettings.from_config(cfg))
    build = ModelBuild("fedavg_cnn", {}, CNN, client.optimizer)
    spec = WorkerSpec(build, client, FedVG(FedVG.Params(), _real_federation(data)))
    worker = ClientWorker(spec, data)
    torch.manual_seed(1)
    params = torch.randn(worker.layout.total) * 0.05
    indices = np.arange(70)  # 3 batches: 32, 32, 6
    ours = validation_gradient(
        WorkerProbe(worker, 0, static_context(0, spec.algorithm.params)), params, indices, 32
    )
    # the official loop (src/server/fedgrad.py get_gradients), on a fresh module
    model = build_model("fedavg_cnn", **CNN)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(worker.layout.view(params, name))
    model.train()
    total = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    batches = 0
    for start in range(0, 70, 32):
        x, y = data.batch(indices[start : start + 32])
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y, reduction="sum").backward()
        for n, p in model.named_parameters():
            total[n] += p.grad
        batches += 1
    official = torch.cat([(total[n] / batches).reshape(-1) for n, _ in model.named_parameters()])
    assert torch.allclose(ours.float(), official, rtol=1e-4, atol=1e-5)


def _real_federation(data: FederatedData) -> FederationInfo:
    from fedsim.simulation import federation_info

    return federation_info(build_model("fedavg_cnn", **CNN), data)


def test_fedvg_round_on_real_data_scores_where_the_workers_are(data):
    overrides = ["algorithm.name=fedvg", "algorithm.val_samples=64", "rounds=1", "join_ratio=0.3",
                 "client.lr=0.05", "data.num_clients=10"]  # fmt: skip
    cfg = load_config(None, [*overrides, *NARROW_CNN])  # where the scores run, not the net
    sim = Simulation(cfg, data=data)
    plan = sim.algorithm.client_start({"params": sim.initial_params}, {}, None, _client(sim, 0))
    assert len(plan.train_indices) == len(data.clients[0].train) - math.floor(
        0.1 * len(data.clients[0].train)
    )
    result = sim.run(LocalExecutor(sim.worker_spec, sim.data))
    assert result.history[0]["num_trained"] == 3
    assert torch.isfinite(result.state["params"]).all()
    assert not torch.equal(result.state["params"], sim.initial_params)


def _client(sim: Simulation, c: int) -> ClientInfo:
    return ClientInfo(c, int(sim.data.train_sizes()[c]), np.zeros(10), 0)


def test_val_holdout_gives_the_baselines_fedvg_training_data(data):
    same = FedVG.Params(weighting="samples", val_holdout=True)
    fed = _real_federation(data)
    algo = FedVG(same, fed)
    assert algo.prepare_data(data, loader, 0) is data
    fedvg_algo = FedVG(FedVG.Params(), fed)
    fedvg_algo.prepare_data(data, loader, 0)
    for c in range(data.num_clients):
        assert np.array_equal(
            algo.weighting.train_indices(c), fedvg_algo.weighting.train_indices(c)
        )
    with pytest.raises(ConfigError, match=r"algorithm\.val_holdout=false: weighting=fedvg needs"):
        load_config(None, ["algorithm.name=fedvg", "algorithm.val_holdout=false"])
    plain = FedVG(FedVG.Params(weighting="samples"), fed)
    plain.prepare_data(data, loader, 0)
    assert plain.weighting.train_indices(0) is None  # FedAvg proper trains on everything


def test_scaffold_with_fedvg_and_a_public_val_set_on_ray_equals_local(ray_pool, data):
    """Server-only samples reach the Ray workers; scores run there; c_i in the store."""
    cfg = load_config(
        None,
        [
            "algorithm.name=scaffold",
            "algorithm.weighting=fedvg",
            "algorithm.val_dataset=mnist-5k",
            "algorithm.val_samples=64",
            "rounds=2",
            "eval_every=100",
            "join_ratio=0.3",
            "client.lr=0.05",
            "data.num_clients=10",
            "runtime.executor=ray",
            "runtime.workers=2",
            "runtime.cpus_per_worker=0.5",
            *NARROW_CNN,
        ],
    )
    sim = Simulation(cfg, data=data)
    assert sim.data.server_samples == round(0.1 * data.train_sizes().sum())
    with lent_ray_executor(sim, ray_pool) as pool:
        pooled = sim.run(pool)
    local_runtime = dataclasses.replace(cfg.runtime, executor="local")
    with make_executor(local_runtime, sim.worker_spec, sim.data) as local_executor:
        local = sim.run(local_executor)
    for key in ("params", "c"):
        assert (pooled.state[key] - local.state[key]).abs().max() <= 1e-5
    assert pooled.client_store.clients() == local.client_store.clients()
    assert pooled.summary["final"]["acc_weighted"] == pytest.approx(
        local.summary["final"]["acc_weighted"], abs=1e-3
    )
