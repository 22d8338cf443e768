"""Newcomers (eval.holdout_clients) of the algorithms that keep a whole personal model beside
a global one: Ditto, APFL, pFedMe, Per-FedAvg. Each serves a held-out client a personal
model started from the global one and adapted on its own train split by the algorithm's own
personal objective; ``kept_params`` is the personal model a client keeps after training.

Hand computations on a scalar quadratic loss f(p; B) = 0.5 ||p - c_B||^2, c_B the mean of
the batch's indices, with the newcomer's train split [0, 1, 2, 3] in batches [0, 1]
(c 0.5) and [2, 3] (c 2.5); one short run on mnist-5k shows Ditto's effect.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from helpers import client_info, federation, leaf_params, quickstart, untimed

from fedsim.algorithm_params.apfl import APFLParams
from fedsim.algorithm_params.ditto import DittoParams
from fedsim.algorithm_params.perfedavg import PerFedAvgParams
from fedsim.algorithm_params.pfedme import PFedMeParams
from fedsim.algorithms.apfl import ALPHA_DECAY, APFL
from fedsim.algorithms.base import ClientInfo
from fedsim.algorithms.ditto import Ditto
from fedsim.algorithms.perfedavg import PerFedAvg
from fedsim.algorithms.pfedme import PFedMe
from fedsim.metrics import GAP_KEY as GAP
from fedsim.streams import NEWCOMER_FINETUNE_KEY, PERFEDAVG_EVAL_KEY

LR = 0.1
CENTERS = (0.5, 2.5)  # c of the batches [0, 1] and [2, 3], in this order every epoch


class QuadraticProbe:
    """f(p; B) = 0.5 ||p - mean(B)||^2 on the train split [0..n), batches of 2 in order.
    ``train`` is plain SGD at ``lr`` over those batches, the terms' gradient correction
    applied (Ditto's pull). Records every call; ``diverge``: every loss is nan."""

    def __init__(self, fed, n: int = 4, diverge: bool = False):
        self.fed, self.lr, self.diverge = fed, LR, diverge
        self.train_indices = np.arange(n)
        self.test_indices = np.arange(n, n + 2)
        self.batch_calls, self.gradient_calls, self.train_calls = [], [], []

    def _loss(self, value: float) -> float:
        return float("nan") if self.diverge else value

    def gradient(self, params, indices=None):
        c = float(np.mean(indices))
        self.gradient_calls.append(list(indices))
        return params - c, self._loss(0.5 * float(((params - c) ** 2).sum()))

    def batches(self, epochs=1, indices=None, key=0):
        self.batch_calls.append((epochs, key))
        idx = self.train_indices if indices is None else np.asarray(indices)
        return [idx[s : s + 2] for _ in range(epochs) for s in range(0, len(idx), 2)]

    def train(self, params, *, epochs=1, terms=None, frozen=None, indices=None, key=0, label=None):
        self.train_calls.append({"epochs": epochs, "terms": terms, "key": key, "label": label})
        grid = self.fed.layout
        p = params.clone()
        idx = self.train_indices if indices is None else np.asarray(indices)
        for batch in [idx[s : s + 2] for _ in range(epochs) for s in range(0, len(idx), 2)]:
            named = leaf_params(p, grid)
            c = float(np.mean(batch))
            for leaf in named.values():
                leaf.grad = (leaf.detach() - c).clone()
            if terms is not None:
                terms.correct_gradients(named)
            for name, leaf in named.items():
                grid.view(p, name).sub_(leaf.grad, alpha=self.lr)
        return p, self._loss(0.1)


def two_clients(params=(("a", (1,)), ("b", (1,)))):
    """A federation of clients 0 and 1 (4 samples, one epoch, batches of 2)."""
    fed = federation(list(params), [4, 4])
    return dataclasses.replace(fed, batch_size=2)


def newcomer(fed, probe) -> ClientInfo:
    """Held-out client 2 (ids from num_clients = 2 on): never index the federation with it."""
    return ClientInfo(
        client=fed.num_clients, num_train=4, class_counts=np.array([4, 0]), round=3, probe=probe
    )


def serve(algo, w: torch.Tensor, epochs: int, probe=None):
    """(newcomer's params, probe); asserts the broadcast and payload are left as they were."""
    probe = probe or QuadraticProbe(algo.federation)
    broadcast, payload = {"params": w}, {}
    before = w.clone()
    params = algo.newcomer_params(broadcast, payload, newcomer(algo.federation, probe), epochs)
    assert torch.equal(broadcast["params"], before) and broadcast["params"] is w
    assert payload == {} and list(broadcast) == ["params"]
    return params, probe


ALGORITHMS = [
    (Ditto, DittoParams()),
    (APFL, APFLParams()),
    (PFedMe, PFedMeParams()),
    (PerFedAvg, PerFedAvgParams()),
]


@pytest.mark.parametrize(("cls", "params"), ALGORITHMS, ids=lambda v: getattr(v, "name", ""))
def test_each_declares_an_adapting_rule_in_its_own_class_and_a_global_model(cls, params):
    rule = cls.__dict__["newcomer"]  # in its own class body, not inherited
    assert rule.adapts and rule.rule and rule.source and not rule.refused
    assert cls.has_global_model
    algo = cls(params, two_clients())
    w = torch.tensor([1.0, 2.0])
    assert algo.global_params({"params": w}) is w


@pytest.mark.parametrize(("cls", "params"), ALGORITHMS, ids=lambda v: getattr(v, "name", ""))
def test_no_finetune_epochs_is_the_global_model_and_touches_no_data(cls, params):
    w = torch.tensor([1.0, 2.0])
    got, probe = serve(cls(params, two_clients()), w, 0)
    assert torch.equal(got, w)
    assert not (probe.batch_calls or probe.gradient_calls or probe.train_calls)


@pytest.mark.parametrize(("cls", "params"), ALGORITHMS, ids=lambda v: getattr(v, "name", ""))
def test_a_diverged_adaptation_falls_back_to_the_global_model(cls, params):
    algo = cls(params, two_clients())
    w = torch.tensor([1.0, 2.0])
    got, _ = serve(algo, w, 1, QuadraticProbe(algo.federation, diverge=True))
    assert torch.equal(got, w)


# ------------------------------------------------------------------ Ditto


@pytest.mark.parametrize("epochs", [1, 2])
def test_ditto_newcomer_trains_v_from_w_with_the_pull_to_w(epochs):
    algo = Ditto(DittoParams(mu=0.5, personal_epochs=3), two_clients())
    w = torch.tensor([1.0, 2.0])
    got, probe = serve(algo, w, epochs)
    (call,) = probe.train_calls  # eval.finetune_epochs epochs, not personal_epochs
    assert call["epochs"] == epochs and call["key"] == NEWCOMER_FINETUNE_KEY
    assert call["label"] is None  # a newcomer records nothing
    assert torch.equal(call["terms"].anchor, w) and call["terms"].mu == 0.5
    want = []
    for w_i in (1.0, 2.0):  # v <- v - lr ((v - c) + mu (v - w)), from v = w
        v = w_i
        for c in CENTERS * epochs:
            v -= LR * ((v - c) + 0.5 * (v - w_i))
        want.append(v)
    if epochs == 1:  # w = 1: 1 - 0.1 (0.5) = 0.95, then 0.95 - 0.1 (-1.55 - 0.025)
        assert want[0] == pytest.approx(1.1075)
    assert torch.allclose(got, torch.tensor(want))


def test_ditto_keeps_its_new_personal_model_after_training():
    fed = two_clients()
    algo = Ditto(DittoParams(mu=0.5), fed)
    probe = QuadraticProbe(fed)
    info = client_info(fed, 0, probe=probe)
    w, v = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 0.0])
    plan = algo.client_start({"params": w}, {}, {"personal": v}, info)
    trained = torch.tensor([7.0, 7.0])  # the global copy's main pass
    update = algo.client_finish(plan, trained, {"personal": v}, info)
    kept = algo.kept_params(plan, trained, update, info)
    assert kept is update.state["personal"] and not torch.equal(kept, trained)
    assert not torch.equal(kept, v)  # the personal pass moved it


# ------------------------------------------------------------------ APFL


def apfl_by_hand(update: str, x: float, epochs: int, a: float = 0.8):
    """APFL's loop from v = w = x, alpha = a, on CENTERS x epochs: (w, v, alpha)."""
    w = v = x
    eta = LR
    for c in CENTERS * epochs:
        if update == "pfllib":
            gw = w - c
            w -= eta * gw
            gv = v - c
            v -= eta * gv
            a -= eta * ((v - w) * (a * gv + (1 - a) * gw) + ALPHA_DECAY * a)
        else:
            vbar = a * v + (1 - a) * w
            gw, gb = w - c, vbar - c
            ga = (v - w) * gb
            w, v = w - eta * gw, v - eta * a * gb
            a -= eta * ga
        a = min(max(a, 0.0), 1.0)
    if update == "pfllib":
        v = (1 - a) * w + a * v  # what a client keeps: the mixture
    return w, v, a


@pytest.mark.parametrize("epochs", [1, 2])
@pytest.mark.parametrize("update", ["pfllib", "paper"])
def test_apfl_newcomer_runs_apfl_from_v_equal_w_and_the_initial_alpha(update, epochs):
    algo = APFL(APFLParams(alpha=0.8, update=update), two_clients([("w", (1,))]))
    x = torch.tensor([1.0])
    got, probe = serve(algo, x, epochs)
    assert probe.batch_calls == [(epochs, NEWCOMER_FINETUNE_KEY)]
    _, v, a = apfl_by_hand(update, 1.0, epochs)
    # pfllib: evaluated with v, the mixture it would keep; paper: a v + (1 - a) w, w global
    want = v if update == "pfllib" else a * v + (1 - a) * 1.0
    assert got.item() == pytest.approx(want, rel=1e-6)
    assert a != 0.8  # alpha adapted as APFL adapts it


@pytest.mark.parametrize("update", ["pfllib", "paper"])
def test_apfl_keeps_its_mixture_after_training(update):
    fed = two_clients([("w", (1,))])
    algo = APFL(APFLParams(alpha=0.8, update=update), fed)
    info = client_info(fed, 0, probe=QuadraticProbe(fed))
    x = torch.tensor([1.0])
    plan = algo.client_start({"params": x}, {}, None, info)
    update_ = algo.client_finish(plan, x, None, info)  # no main pass: trained is x
    kept = algo.kept_params(plan, x, update_, info)
    w, v, a = apfl_by_hand(update, 1.0, 1)
    want = v if update == "pfllib" else a * v + (1 - a) * w  # its trained w, not x
    assert kept.item() == pytest.approx(want, rel=1e-6)
    assert update_.sums["shared"][1].item() == pytest.approx(w, rel=1e-6)


# ------------------------------------------------------------------ pFedMe


def pfedme_by_hand(x: float, epochs: int, lamda=1.0, personal_lr=0.1, K=2, mu=0.01):
    w = theta = x
    for c in CENTERS * epochs:
        for _ in range(K):
            theta -= personal_lr * ((theta - c) + lamda * (theta - w) + mu * theta)
        w -= LR * lamda * (w - theta)
    return w, theta


PFEDME = PFedMeParams(lamda=1.0, personal_lr=0.1, K=2, mu=0.01)


@pytest.mark.parametrize("epochs", [1, 2])
def test_pfedme_newcomer_is_theta_of_its_loop_from_the_global_model(epochs):
    algo = PFedMe(PFEDME, two_clients([("w", (1,))]))
    got, probe = serve(algo, torch.tensor([1.0]), epochs)
    assert probe.batch_calls == [(epochs, NEWCOMER_FINETUNE_KEY)]
    assert len(probe.gradient_calls) == 2 * 2 * epochs  # K steps per batch
    _, theta = pfedme_by_hand(1.0, epochs)
    assert got.item() == pytest.approx(theta, rel=1e-6)


def test_pfedme_evaluated_globally_serves_the_global_model_as_it_is():
    algo = PFedMe(dataclasses.replace(PFEDME, evaluate="global"), two_clients([("w", (1,))]))
    w = torch.tensor([1.0])
    got, probe = serve(algo, w, 2)
    assert torch.equal(got, w) and not probe.gradient_calls


@pytest.mark.parametrize("evaluate", ["personal", "global"])
def test_pfedme_keeps_theta_after_training(evaluate):
    fed = two_clients([("w", (1,))])
    algo = PFedMe(dataclasses.replace(PFEDME, evaluate=evaluate), fed)
    info = client_info(fed, 0, probe=QuadraticProbe(fed))
    x = torch.tensor([1.0])
    plan = algo.client_start({"params": x}, {}, None, info)
    update = algo.client_finish(plan, x, None, info)
    kept = algo.kept_params(plan, x, update, info)
    w, theta = pfedme_by_hand(1.0, 1)
    assert kept.item() == pytest.approx(theta if evaluate == "personal" else w, rel=1e-6)


# ------------------------------------------------------------------ Per-FedAvg


@pytest.mark.parametrize("epochs", [1, 3])
def test_perfedavg_newcomer_takes_the_step_every_client_is_evaluated_with(epochs):
    fed = two_clients([("w", (1,))])
    algo = PerFedAvg(PerFedAvgParams(alpha=0.2), fed)
    theta = torch.tensor([1.0])
    got, probe = serve(algo, theta, epochs)
    # one step on the first minibatch of the evaluation stream, whatever finetune_epochs
    assert probe.batch_calls == [(1, PERFEDAVG_EVAL_KEY)] and probe.gradient_calls == [[0, 1]]
    assert got.item() == pytest.approx(1.0 - 0.2 * (1.0 - 0.5))
    # the same protocol as a client of the federation evaluated with the same data
    probe = QuadraticProbe(fed)
    plan = algo.client_start({"params": theta}, {}, None, client_info(fed, 0, probe=probe))
    assert torch.equal(plan.eval_params, got)


def test_perfedavg_keeps_its_meta_trained_model_after_that_step():
    fed = two_clients([("w", (1,))])
    algo = PerFedAvg(PerFedAvgParams(alpha=0.2, beta=0.3), fed)
    info = dataclasses.replace(client_info(fed, 0, probe=QuadraticProbe(fed)), evaluates=False)
    x = torch.tensor([1.0])
    plan = algo.client_start({"params": x}, {}, None, info)
    assert plan.eval_params is None  # evaluated after training: no step before it
    update = algo.client_finish(plan, x, None, info)
    kept = algo.kept_params(plan, x, update, info)
    # one meta-step on [0, 1, 2, 3]: D1 = [0, 1] (c 0.5), D2 = [2, 3] (c 2.5)
    inner = 1.0 - 0.2 * (1.0 - 0.5)  # 0.9
    theta = 1.0 - 0.3 * (inner - 2.5)  # 1.48, uploaded
    assert update.sums["shared"][1].item() == pytest.approx(theta, rel=1e-6)
    # then the evaluation's step on its first minibatch [0, 1]: 1.48 - 0.2 (0.98)
    assert kept.item() == pytest.approx(theta - 0.2 * (theta - 0.5), rel=1e-6)
    assert kept.item() == pytest.approx(1.284, rel=1e-6)


# ------------------------------------------------------------------ a run on mnist-5k


@pytest.mark.slow
def test_ditto_newcomers_adapted_by_the_personal_objective_beat_the_global_model():
    """Held-out clients of a pathological split (2 classes each): Ditto's personal model
    after one epoch of its own objective against the global model as it is; the training
    clients' numbers do not depend on how newcomers are served."""
    from fedsim.runtime.executor import LocalExecutor
    from fedsim.simulation import Simulation

    torch.set_num_threads(1)
    runs = {}
    for epochs in (1, 0):
        cfg = quickstart(
            "algorithm.name=ditto", "data.partition.name=pathological", "data.num_clients=16",
            "eval.holdout_clients=0.25", "rounds=1", "seed=1", f"eval.finetune_epochs={epochs}",
        )  # fmt: skip
        sim = Simulation(cfg)
        executor = LocalExecutor(sim.worker_spec, sim.data)
        try:
            runs[epochs] = sim.run(executor).history
        finally:
            executor.close()
    adapted, as_is = (runs[e][-1]["unseen/acc_weighted"] for e in (1, 0))
    # measured after round 1 (seeds 1-5): 0.89-0.97 adapted, 0.02-0.25 as it is (seed 1:
    # 0.967 against 0.015)
    assert adapted > 0.8 and adapted > as_is + 0.4, (adapted, as_is)
    seen = [[{k: v for k, v in h.items() if "unseen" not in k and k != GAP} for h in untimed(r)]
            for r in (runs[1], runs[0])]  # fmt: skip
    assert seen[0] == seen[1]
