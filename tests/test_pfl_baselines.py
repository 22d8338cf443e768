"""The ten personalization baselines through the seam, against hand computations.

Server rules on small tensors (which entries are averaged with n_i weights and which stay
on the client or the server; FedNova's normalized step; pFedMe's beta), the client loops of
the algorithms that train in their own loop (APFL, pFedMe, Per-FedAvg) on a quadratic loss
whose gradients are known in closed form, and the client terms of FedRoD and MOON on a tiny
module. Real-data effects: tests/test_pfl_baselines_effect.py.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import client_info, federation, module_federation, run_round
from torch import nn

from fedsim.algorithm_params.apfl import APFLParams
from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.algorithm_params.fedbabu import FedBABUParams
from fedsim.algorithm_params.fedrep import FedRepParams
from fedsim.algorithm_params.lgfedavg import LGFedAvgParams
from fedsim.algorithm_params.moon import MOONParams
from fedsim.algorithm_params.perfedavg import PerFedAvgParams
from fedsim.algorithm_params.pfedme import PFedMeParams
from fedsim.algorithms.apfl import APFL
from fedsim.algorithms.base import ClientInfo, FederationInfo
from fedsim.algorithms.fedbabu import FedBABU
from fedsim.algorithms.fedbn import FedBN
from fedsim.algorithms.fednova import FedNova
from fedsim.algorithms.fedrep import FedRep
from fedsim.algorithms.fedrod import BalancedSoftmaxAndPersonalHead, FedRoD
from fedsim.algorithms.lgfedavg import LGFedAvg
from fedsim.algorithms.moon import MOON, ModelContrastive
from fedsim.algorithms.perfedavg import PerFedAvg
from fedsim.algorithms.pfedme import PFedMe
from fedsim.errors import ConfigError
from fedsim.simulation import batchnorm_names
from lightning_modules.base import FLModule
from lightning_modules.flat_params import ParamLayout, flatten_module
from lightning_modules.registry import build_model

SIZES = [10, 30]


def split_fed(**extra) -> FederationInfo:
    """body (2,), bn (1,) a BatchNorm weight, fc (2,) the head; clients of SIZES."""
    fed = federation([("body", (2,)), ("bn", (1,)), ("fc", (2,))], SIZES, head=["fc"])
    return dataclasses.replace(fed, batchnorm_names=["bn"], **extra)


X0 = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0])  # server model: body, bn, fc
TRAINED = [torch.tensor([0.0, 2.0, 3.0, 4.0, 5.0]), torch.tensor([4.0, 6.0, 7.0, 8.0, 9.0])]
MEAN = (10 * TRAINED[0] + 30 * TRAINED[1]) / 40  # n_i weights


@pytest.mark.parametrize(
    ("algo", "shared", "kept"),
    [
        (FedRep(FedRepParams(), split_fed()), [0, 1, 2], [3, 4]),  # body + bn | head
        (LGFedAvg(LGFedAvgParams(), split_fed()), [3, 4], [0, 1, 2]),  # head | below
        (FedBN(AlgorithmParams(), split_fed()), [0, 1, 3, 4], [2]),  # all but BatchNorm | bn
        (FedBABU(FedBABUParams(), split_fed()), [0, 1, 2], []),  # body | (head: the server's)
    ],
    ids=["fedrep", "lgfedavg", "fedbn", "fedbabu"],
)
def test_shared_part_is_averaged_with_sample_weights_and_the_rest_stays(algo, shared, kept):
    state = algo.init_state(X0)
    new, updates = run_round(algo, state, TRAINED)
    want = X0.clone()
    want[shared] = MEAN[shared]
    assert torch.allclose(new["params"], want)
    for c, update in updates.items():
        if kept:
            assert torch.equal(update.state["personal"], TRAINED[c][kept])
        else:
            assert update.state is None
    # next round: the server's shared part with the client's own personal part
    broadcast = algo.broadcast(new)
    info = client_info(algo.federation, 1, 1)
    plan = algo.client_start(broadcast, {}, updates[1].state, info)
    start = want.clone()
    start[kept] = TRAINED[1][kept]
    assert torch.equal(plan.train_params, start)
    upload = algo.model_upload(info)
    entries = sorted(i for a, b in upload.ranges for i in range(a, b))
    assert entries == shared and upload.sums == ("shared",)


def test_fedbabu_trains_the_body_under_the_frozen_head_and_fine_tunes_to_evaluate():
    algo = FedBABU(FedBABUParams(finetune_epochs=3), split_fed())
    probe = TrainProbe()
    for evaluates in (True, False):
        info = dataclasses.replace(
            client_info(algo.federation, 0, probe=probe), evaluates=evaluates
        )
        plan = algo.client_start({"params": X0}, {}, None, info)
        assert plan.frozen == ["fc"] and torch.equal(plan.train_params, X0)
        if evaluates:  # the whole model, fine-tuned from the received one; not kept
            assert probe.calls[-1] == (3, None)
            assert torch.equal(plan.eval_params, X0 + 1)
        else:
            assert plan.eval_params is None and len(probe.calls) == 1


def test_fedrep_trains_its_head_with_the_body_frozen_then_the_body_with_the_head_frozen():
    algo = FedRep(FedRepParams(head_epochs=2), split_fed())
    probe = TrainProbe()
    own = {"personal": torch.tensor([7.0, 8.0])}
    for trains in (True, False):
        info = dataclasses.replace(client_info(algo.federation, 0, probe=probe), trains=trains)
        plan = algo.client_start({"params": X0}, {}, own, info)
        model = torch.tensor([1.0, 1.0, 1.0, 7.0, 8.0])
        assert plan.frozen == ["fc"]  # the main pass: the body
        if trains:
            assert probe.calls[-1] == (2, ["body", "bn"])  # the head pass: body frozen
            assert torch.equal(plan.eval_params, model)  # evaluated before the head pass
            assert torch.equal(plan.train_params, torch.tensor([1.0, 1.0, 1.0, 8.0, 9.0]))
        else:
            assert torch.equal(plan.train_params, model) and len(probe.calls) == 1


class TrainProbe:
    """probe.train adds 1 to every entry that is not frozen; records (epochs, frozen)."""

    lr = 0.1

    def __init__(self):
        self.calls = []

    def train(self, params, *, epochs=1, terms=None, frozen=None, indices=None, key=0, label=None):
        self.calls.append((epochs, frozen))
        out = params.clone()
        grid = ParamLayout(split_fed().layout.entries)
        for e in grid.entries:
            if e.name not in (frozen or []):
                grid.view(out, e.name).add_(1)
        return out, 0.5


def test_fedbn_needs_batchnorm_layers_and_finds_them_by_type():
    fed = dataclasses.replace(split_fed(), batchnorm_names=[])
    with pytest.raises(ConfigError, match="algorithm.name='fedbn'.*fedavg_cnn_bn"):
        FedBN(AlgorithmParams(), fed)
    cnn_bn = build_model("fedavg_cnn_bn", in_channels=1, num_classes=10, image_size=28)
    assert batchnorm_names(cnn_bn) == [
        "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
        "bn2.weight", "bn2.bias", "bn2.running_mean", "bn2.running_var",
    ]  # fmt: skip
    assert batchnorm_names(build_model("fedavg_cnn", in_channels=1, num_classes=10)) == []
    resnet = build_model("resnet18", in_channels=3, num_classes=10, image_size=32)
    assert len(batchnorm_names(resnet)) == 4 * sum(
        isinstance(m, nn.BatchNorm2d) for m in resnet.modules()
    )


def test_lgfedavg_global_layers_beyond_the_model_is_a_config_error():
    with pytest.raises(ConfigError, match="algorithm.global_layers"):
        LGFedAvg(LGFedAvgParams(global_layers=4), split_fed())


# ------------------------------------------------------------------ FedNova, pFedMe servers


def test_fednova_steps_by_the_mean_local_steps_times_the_mean_normalized_update():
    fed = federation([("w", (2,))], SIZES)
    fed = dataclasses.replace(fed, batch_size=10)
    algo = FedNova(AlgorithmParams(), fed)
    x = torch.tensor([1.0, 1.0])
    y = [torch.tensor([0.0, 2.0]), torch.tensor([-17.0, 1.0])]
    new, updates = run_round(algo, algo.init_state(x), y, epochs=[1, 3])
    # tau = epochs x ceil(n / batch): 1 x 1 and 3 x 3; p = 10/40, 30/40
    tau, p = [1, 9], [0.25, 0.75]
    d = [(x - y[k]) / tau[k] for k in range(2)]  # [1, -1] and [2, 0]
    tau_eff = p[0] * tau[0] + p[1] * tau[1]  # 7
    want = x - tau_eff * (p[0] * d[0] + p[1] * d[1])  # [1 - 12.25, 1 + 1.75]
    assert torch.allclose(new["params"], torch.tensor([-11.25, 2.75]))
    assert torch.allclose(new["params"], want)
    fedavg = p[0] * y[0] + p[1] * y[1]  # [-12.75, 1.25]: FedAvg weighs by p_k tau_k
    assert not torch.allclose(new["params"], fedavg)
    assert updates[1].sums["tau"][1].item() == 9.0
    # equal local steps: FedNova is FedAvg
    fed_equal = dataclasses.replace(fed, train_sizes=np.array([20, 20]))
    algo = FedNova(AlgorithmParams(), fed_equal)
    new, _ = run_round(algo, algo.init_state(x), y)
    assert torch.allclose(new["params"], (y[0] + y[1]) / 2)


@pytest.mark.parametrize("beta", [1.0, 0.5, 2.0])
def test_pfedme_server_mixes_the_mean_in_by_beta(beta):
    algo = PFedMe(PFedMeParams(beta=beta), federation([("w", (2,))], SIZES))
    x = torch.tensor([1.0, -1.0])
    sums = run_round_sums(algo, [torch.tensor([3.0, 1.0]), torch.tensor([-1.0, 5.0])])
    new = algo.aggregate(algo.init_state(x), sums, {}, algo.context(0))
    mean = (10 * torch.tensor([3.0, 1.0]) + 30 * torch.tensor([-1.0, 5.0])) / 40
    assert torch.allclose(new["params"], (1 - beta) * x + beta * mean)


def run_round_sums(algo, uploads):
    """The reduced sums of clients that upload ``uploads`` (the shared-part sum)."""
    from helpers import reduce_updates

    from fedsim.algorithms.base import ClientUpdate

    updates = [ClientUpdate(sums={"shared": (float(SIZES[c]), u)}) for c, u in enumerate(uploads)]
    return reduce_updates(updates, [0] * len(updates))


# ------------------------------------------------------------------ own loops, quadratic loss


class QuadraticProbe:
    """f(theta; batch) = 0.5 ||theta - c||^2 with c = mean(batch): gradient theta - c.
    Minibatches: the train indices in order (no shuffle), ``batch`` at a time."""

    def __init__(self, n: int, batch: int, lr: float):
        self.train_indices = np.arange(n)
        self.test_indices = np.arange(n, n + 2)
        self.batch, self.lr = batch, lr
        self.calls = []

    def gradient(self, params, indices=None):
        c = float(np.mean(indices))
        self.calls.append(len(indices))
        return params - c, 0.5 * float(((params - c) ** 2).sum())

    def batches(self, epochs=1, indices=None, key=0):
        idx = self.train_indices if indices is None else np.asarray(indices)
        return [
            idx[s : s + self.batch] for _ in range(epochs) for s in range(0, len(idx), self.batch)
        ]


def own_loop_fed() -> FederationInfo:
    """Clients 0 and 1 (4 samples, batches of 2; one local epoch each: ClientInfo's)."""
    fed = federation([("w", (1,))], [4, 4])
    return dataclasses.replace(fed, batch_size=2)


def own_round(algo, x: float, state=None, probe=None):
    probe = probe or QuadraticProbe(4, 2, lr=0.05)  # batches [0, 1] (c 0.5), [2, 3] (c 2.5)
    info = client_info(algo.federation, 0, probe=probe)
    plan = algo.client_start({"params": torch.tensor([x])}, {}, state, info)
    assert plan.epochs == 0  # no main pass
    return plan, algo.client_finish(plan, plan.train_params, state, info)


def test_pfedme_client_loop_by_hand():
    p = PFedMeParams(lamda=1.0, personal_lr=0.1, K=2, mu=0.01)
    algo = PFedMe(p, own_loop_fed())
    plan, update = own_round(algo, 1.0)
    w = theta = 1.0
    for c in (0.5, 2.5):
        for _ in range(2):
            theta -= 0.1 * ((theta - c) + 1.0 * (theta - w) + 0.01 * theta)
        w -= 0.05 * 1.0 * (w - theta)
    assert update.sums["shared"][1].item() == pytest.approx(w, rel=1e-6)
    assert update.state["personal"].item() == pytest.approx(theta, rel=1e-6)
    # evaluated with theta next round (personal), or with the global model (PFLlib's)
    info = client_info(algo.federation, 0)
    assert algo.client_start({"params": X0[:1]}, {}, update.state, info).eval_params is not None
    glob = PFedMe(dataclasses.replace(p, evaluate="global"), own_loop_fed())
    assert glob.client_start({"params": X0[:1]}, {}, update.state, info).eval_params is None


@pytest.mark.parametrize("update_rule", ["pfllib", "paper"])
def test_apfl_client_loop_by_hand(update_rule):
    algo = APFL(APFLParams(alpha=0.8, update=update_rule), own_loop_fed())
    state = {"personal": torch.tensor([0.5]), "alpha": 0.8}
    plan, update = own_round(algo, 0.0, state)
    w, v, a, eta = 0.0, 0.5, 0.8, 0.05
    for c in (0.5, 2.5):
        if update_rule == "pfllib":
            gw = w - c
            w -= eta * gw
            gv = v - c
            v -= eta * gv
            a -= eta * ((v - w) * (a * gv + (1 - a) * gw) + 0.02 * a)
        else:
            vbar = a * v + (1 - a) * w
            gw, gb = w - c, vbar - c
            ga = (v - w) * gb
            w, v = w - eta * gw, v - eta * a * gb
            a -= eta * ga
        a = min(max(a, 0.0), 1.0)
    if update_rule == "pfllib":
        v = (1 - a) * w + a * v  # collapsed into the mixture
        assert torch.equal(plan.eval_params, state["personal"])
    else:
        assert plan.eval_params.item() == pytest.approx(0.8 * 0.5, rel=1e-6)  # a v + (1-a) w
    assert update.sums["shared"][1].item() == pytest.approx(w, rel=1e-6)
    assert update.state["personal"].item() == pytest.approx(v, rel=1e-6)
    assert update.state["alpha"] == pytest.approx(a, rel=1e-6)


@pytest.mark.parametrize("order", ["first", "hessian_free"])
def test_perfedavg_meta_steps_by_hand(order):
    algo = PerFedAvg(PerFedAvgParams(alpha=0.1, beta=0.2, order=order), own_loop_fed())
    probe = QuadraticProbe(5, 2, lr=0.05)  # one epoch: [0, 1, 2, 3] and [4]: one meta-step
    plan, update = own_round(algo, 1.0, probe=probe)
    d1, d2 = 0.5, 2.5  # halves [0, 1] and [2, 3]; the lone [4] is no meta-step
    theta = 1.0
    g1 = theta - d1
    g2 = (theta - 0.1 * g1) - d2
    if order == "hessian_free":
        g2 -= 0.1 * 1.0 * g2  # H = I for this loss
    theta -= 0.2 * g2
    # (the Hessian product is a finite difference in float32: ~1e-4 relative)
    assert update.sums["shared"][1].item() == pytest.approx(
        theta, rel=1e-5 if order == "first" else 1e-4
    )
    # evaluated after one step of alpha on its first minibatch [0, 1]
    assert plan.eval_params.item() == pytest.approx(1.0 - 0.1 * (1.0 - 0.5), rel=1e-6)


def test_own_loop_algorithms_upload_no_model_update_for_the_deployment_stages():
    for algo in (
        APFL(APFLParams(), own_loop_fed()),
        PFedMe(PFedMeParams(), own_loop_fed()),
        PerFedAvg(PerFedAvgParams(), own_loop_fed()),
    ):
        assert (
            algo.trains_in_own_loop and algo.model_upload(client_info(algo.federation, 0)) is None
        )


def test_an_own_loop_algorithm_refuses_what_acts_on_the_main_pass():
    from fedsim.config import load_config
    from fedsim.rounds.compose import check_own_loop

    for key in ("client.momentum=0.9", "client.clip_grad_norm=1", "attack.kind=label_flip"):
        cfg = load_config("configs/quickstart.yaml", ["algorithm.name=pfedme", key])
        with pytest.raises(ConfigError, match=key.split("=")[0] + ".*algorithm.name=pfedme"):
            check_own_loop(cfg)


# ------------------------------------------------------------------ FedRoD, MOON terms


class Tiny(FLModule):
    block_names = ("body", "fc")

    def __init__(self):
        super().__init__(lr=0.1)
        self.body = nn.Linear(3, 4)
        self.fc = nn.Linear(4, 2)

    def features(self, x):
        return torch.relu(self.body(x))

    def forward(self, x):
        return self.fc(self.features(x))


def test_fedrod_evaluates_generic_plus_personal_head_and_trains_both():
    torch.manual_seed(0)
    module = Tiny()
    counts = np.array([[5, 0], [2, 3]])
    fed = module_federation(module, counts)
    algo = FedRoD(AlgorithmParams(), fed)
    state = algo.init_state(flatten_module(module))
    personal = torch.randn(10)
    info = client_info(fed, 1)
    plan = algo.client_start(algo.broadcast(state), {}, {"head": personal}, info)
    x = torch.randn(6, 3)
    z = module.features(x)
    want = module.fc(z) + F.linear(z, personal[:8].view(2, 4), personal[8:])
    torch.nn.utils.vector_to_parameters(plan.eval_params, module.parameters())
    assert torch.allclose(module(x), want, atol=1e-6)

    # the terms: balanced softmax on the generic logits; one SGD step of the personal head
    torch.nn.utils.vector_to_parameters(state["params"], module.parameters())
    y = torch.tensor([0, 1, 1, 0, 1, 1])
    terms = BalancedSoftmaxAndPersonalHead(counts[1], personal, (2, 4), lr=0.5)
    loss = terms.objective(module, (x, y))
    logits = module.fc(module.features(x))
    assert torch.allclose(loss, F.cross_entropy(logits + torch.log(torch.tensor([2.0, 3.0])), y))
    w = personal[:8].view(2, 4).clone().requires_grad_(True)
    b = personal[8:].clone().requires_grad_(True)
    F.cross_entropy(logits.detach() + F.linear(z.detach(), w, b), y).backward()
    stepped = torch.cat([(w - 0.5 * w.grad).reshape(-1), b - 0.5 * b.grad]).detach()
    assert torch.allclose(terms.trained_head(), stepped, atol=1e-6)
    # an absent class gets -inf in the prior and no gradient, not a NaN
    terms0 = BalancedSoftmaxAndPersonalHead(counts[0], personal, (2, 4), lr=0.5)
    loss0 = terms0.objective(module, (x[:2], torch.tensor([0, 0])))
    loss0.backward()
    assert math.isfinite(float(loss0.detach())) and all(
        torch.isfinite(p.grad).all() for p in module.parameters()
    )


def test_moon_loss_is_cross_entropy_plus_mu_times_the_model_contrastive_term():
    torch.manual_seed(0)
    module = Tiny()
    grid = ParamLayout.from_module(module)
    current = flatten_module(module)
    glob, previous = (
        current + 0.1 * torch.randn_like(current),
        current + 0.3 * torch.randn_like(current),
    )
    terms = ModelContrastive(glob, previous, grid, mu=2.0, tau=0.5)
    x, y = torch.randn(5, 3), torch.tensor([0, 1, 1, 0, 1])
    loss = terms.objective(module, (x, y))

    def features_at(flat):
        other = Tiny()
        torch.nn.utils.vector_to_parameters(flat, other.parameters())
        return other.features(x).detach()

    z = module.features(x)
    sim_g = F.cosine_similarity(z, features_at(glob)) / 0.5
    sim_p = F.cosine_similarity(z, features_at(previous)) / 0.5
    con = -torch.log(torch.exp(sim_g) / (torch.exp(sim_g) + torch.exp(sim_p)))  # PFLlib's form
    assert torch.allclose(loss, F.cross_entropy(module(x), y) + 2.0 * con.mean(), atol=1e-6)
    # against itself twice (round 0: global = previous) the term is log 2
    same = ModelContrastive(current, current, grid, mu=1.0, tau=0.5)
    assert float(same.objective(module, (x, y)).detach()) == pytest.approx(
        float(F.cross_entropy(module(x), y).detach()) + math.log(2), abs=1e-6
    )


def test_moon_with_mu_zero_trains_on_cross_entropy_alone():
    module = Tiny()
    algo = MOON(MOONParams(mu=0.0), module_federation(module, np.array([[1, 1]])))
    info: ClientInfo = client_info(algo.federation, 0)
    assert algo.client_start({"params": flatten_module(module)}, {}, None, info).terms is None
