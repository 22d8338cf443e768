"""Held-out clients (``eval.holdout_clients``), the global model (``eval.model``) and when a
client is evaluated (``eval.when``): the draw, the renumbering, the metrics by hand, the
promise that a newcomer's evaluation changes nothing the federation keeps, the run folder,
resume, Ray, and the one-line refusals."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import NARROW_CNN, newcomers_unevaluated, refused_check, run_local_and_ray, untimed

from fedsim.algorithm_params import example_params
from fedsim.config import load_config
from fedsim.data.dataset_types import ImageDataset
from fedsim.data.federated import ClientSplit, FederatedData
from fedsim.data.holdout import held_out_ids, hold_out, holdout_count
from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment
from fedsim.metrics import evaluation_summary
from fedsim.runtime.executor import LocalExecutor
from fedsim.simulation import Simulation

BASE = [
    "seed=0",
    "rounds=3",
    "data.name=mnist-5k",
    "data.max_samples=800",
    "data.num_clients=8",
    "data.partition.name=pathological",
    "client.lr=0.05",
    "runtime.executor=local",
    "runtime.device=cpu",
    *NARROW_CNN,
]
UNSEEN = ("unseen/", "participation_gap")


def run(*options: str, evaluate_newcomers: bool = True):
    """A local run of BASE + ``options``; ``evaluate_newcomers=False``: the loop plans no
    held-out client's evaluation (the control of the does-not-change-anything test)."""
    torch.set_num_threads(1)
    sim = Simulation(load_config(None, [*BASE, *options]))
    members = sim.data.num_clients if not evaluate_newcomers else len(sim.data.everyone)
    with newcomers_unevaluated(members):
        return sim, sim.run(LocalExecutor(sim.worker_spec, sim.data))


def seen_only(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if not k.startswith(UNSEEN)} for h in untimed(history)]


# ----------------------------------------------------------------------------- the draw


@pytest.mark.parametrize(("value", "clients", "count"),
                         [(0, 8, 0), (2, 8, 2), (0.25, 8, 2), (0.01, 8, 1), (7, 8, 7)])  # fmt: skip
def test_holdout_count_takes_a_count_or_a_fraction(value, clients, count) -> None:
    assert holdout_count(value, clients) == count


@pytest.mark.parametrize("value", [8, 0.99])
def test_holdout_that_leaves_no_client_to_train_is_refused(value) -> None:
    with pytest.raises(ConfigError, match=r"eval.holdout_clients=.*hold out at most 7"):
        holdout_count(value, 8)


def test_held_out_clients_are_drawn_by_the_seed() -> None:
    drawn = held_out_ids(20, 4, seed=3)
    assert drawn == held_out_ids(20, 4, seed=3) == sorted(drawn) and len(set(drawn)) == 4
    assert any(held_out_ids(20, 4, seed=s) != drawn for s in range(4, 8))


def tiny_data() -> FederatedData:
    labels = np.array([0, 1, 0, 1, 0, 1, 0, 1, 1, 1], dtype=np.int64)
    dataset = ImageDataset("tiny", np.zeros((10, 1, 2, 2), np.uint8), labels, 2)
    clients = [ClientSplit(np.array([2 * k]), np.array([2 * k + 1])) for k in range(5)]
    partition = {"name": "relabel", "client_clusters": [0, 1, 0, 1, 0],
                 "clients": [{"client": k, "role": f"r{k}"} for k in range(5)]}  # fmt: skip
    return FederatedData(dataset, clients, partition)


def test_hold_out_renumbers_the_federation_and_puts_held_out_clients_last() -> None:
    """Kept clients keep their order as 0..M-1; held-out ones follow; the partition's
    per-client lists follow them; partition.json marks them."""
    data = tiny_data()
    held = held_out_ids(5, 2, seed=0)
    kept = [c for c in range(5) if c not in held]
    out = hold_out(data, 2, seed=0)
    assert out.num_clients == 3 and len(out.newcomers) == 2
    for run_id, original in enumerate(kept + held):
        assert out.split(run_id) is data.clients[original]
    assert out.partition["client_clusters"] == [[0, 1, 0, 1, 0][c] for c in kept + held]
    assert [r["role"] for r in out.partition["clients"]] == [f"r{c}" for c in kept + held]
    assert out.partition["holdout"] == {"partition_ids": kept + held, "held_out": 2}
    assert out.class_counts("train").shape == (3, 2)
    assert out.class_counts("train", newcomers=True).shape == (5, 2)
    summary = out.partition_summary()
    assert summary["held_out"] == [3, 4] and summary["num_clients"] == 5
    assert [c.get("held_out", False) for c in summary["clients"]] == [False] * 3 + [True] * 2
    assert hold_out(data, 0, seed=0) is data


# ----------------------------------------------------------------------- metrics by hand


def test_evaluation_summary_splits_seen_and_unseen_clients_by_hand() -> None:
    """Clients A, B train (3/4 and 1/2 right), C is held out (1/4): seen acc_weighted
    4/6, unseen 1/4, gap 4/6 - 1/4; the global model's (2/4, 2/2) on seen clients only."""
    correct, n = np.array([3, 1, 1]), np.array([4, 2, 4])
    loss = np.array([0.4, 0.2, 4.0])
    held = np.array([False, False, True])
    out = evaluation_summary(correct, n, loss, held, np.array([2, 2, 0]), np.array([1.0, 0.0, 0]))
    assert out["acc_weighted"] == pytest.approx(4 / 6)
    assert out["acc_mean"] == pytest.approx((3 / 4 + 1 / 2) / 2)
    assert out["loss"] == pytest.approx(0.6 / 6)
    assert out["unseen/acc_weighted"] == pytest.approx(1 / 4)
    assert out["unseen/acc_worst10"] == pytest.approx(1 / 4)
    assert out["unseen/loss"] == pytest.approx(1.0)
    assert out["participation_gap"] == pytest.approx(4 / 6 - 1 / 4)
    assert out["global/acc_weighted"] == pytest.approx(4 / 6)
    assert out["global/acc_mean"] == pytest.approx((2 / 4 + 2 / 2) / 2)
    assert out["global/loss"] == pytest.approx(1.0 / 6)
    plain = evaluation_summary(correct[:2], n[:2], loss[:2], held[:2])
    assert not any(k.startswith(("unseen/", "global/", "participation")) for k in plain)


# ------------------------------------------------------------------ real runs, promises


def test_newcomers_change_nothing_the_federation_keeps() -> None:
    """SCAFFOLD (server and client control variates) with 2 held-out clients: the run equals,
    to the bit, the same run whose loop never evaluates them (metrics apart from unseen/*,
    server state, every client's state)."""
    options = ["algorithm.name=scaffold", "eval.holdout_clients=2"]
    _, with_newcomers = run(*options)
    _, without = run(*options, evaluate_newcomers=False)
    assert "unseen/acc_weighted" in with_newcomers.history[0]
    assert "unseen/acc_weighted" not in without.history[0]
    assert seen_only(with_newcomers.history) == seen_only(without.history)
    for key in with_newcomers.state:
        assert torch.equal(with_newcomers.state[key], without.state[key]), key
    store_a, store_b = with_newcomers.client_store, without.client_store
    assert sorted(store_a.clients()) == sorted(store_b.clients())
    assert max(store_a.clients()) < 6  # no held-out client ever has a state
    for client in store_a.clients():
        for key, value in store_a.get(client).items():
            assert torch.equal(value, store_b.get(client)[key]), (client, key)


def test_the_run_folder_reports_unseen_clients(tmp_path: Path) -> None:
    """metrics.jsonl, summary.json (best and final), clients.csv's held_out column and
    partition.json all say who was held out and how they did."""
    cfg = load_config(None, [*BASE, "eval.holdout_clients=0.25", "rounds=2"])
    result = run_experiment(cfg, tmp_path, progress=False, report=False)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all("unseen/acc_weighted" in line and "participation_gap" in line for line in lines)
    summary = json.loads((tmp_path / "summary.json").read_text())
    for which in ("best", "final"):
        assert {"unseen/acc_weighted", "unseen/acc_mean", "unseen/acc_worst10",
                "participation_gap"} <= set(summary[which])  # fmt: skip
    assert summary == result.summary
    with open(tmp_path / "clients.csv") as handle:
        rows = list(csv.DictReader(handle))
    held = {int(r["client"]) for r in rows if r["held_out"] == "True"}
    assert held == {6, 7} and {r["held_out"] for r in rows} == {"True", "False"}
    partition = json.loads((tmp_path / "partition.json").read_text())
    assert partition["held_out"] == [6, 7]


def test_resumed_run_with_held_out_clients_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    options = [*BASE, "algorithm.name=fedper", "eval.holdout_clients=2", "checkpoint_every=1"]

    def go(out: Path, *extra: str, resume: bool = False):
        torch.set_num_threads(1)
        cfg = load_config(None, [*options, *extra])
        return run_experiment(cfg, out, progress=False, report=False, resume=resume)

    straight = go(tmp_path / "straight")
    go(tmp_path / "resumed", "rounds=2")
    resumed = go(tmp_path / "resumed", resume=True)
    assert untimed(resumed.history) == untimed(straight.history)
    assert "unseen/acc_weighted" in resumed.history[-1]
    assert (tmp_path / "resumed" / "clients.csv").read_text() == (
        tmp_path / "straight" / "clients.csv"
    ).read_text()


def test_ray_equals_the_local_executor_with_held_out_clients(ray_pool) -> None:
    cfg = load_config(None, [*BASE, "rounds=2", "algorithm.name=fedper",
                             "eval.holdout_clients=2", "eval.model=personal"])  # fmt: skip
    local, ray_run = run_local_and_ray(cfg, ray_pool)
    assert "unseen/acc_weighted" in local.history[-1]
    assert untimed(ray_run.history) == untimed(local.history)


def test_global_model_of_fedavg_is_its_personal_model() -> None:
    """FedAvg's clients use the global model: eval.model=both reports global/* equal to the
    usual accuracies, and eval.model=global gives the default run's numbers."""
    _, default = run()
    _, both = run("eval.model=both")
    _, only_global = run("eval.model=global")
    for h in both.history:
        assert h["global/acc_weighted"] == h["acc_weighted"]
        assert h["global/acc_worst10"] == h["acc_worst10"]
    assert untimed(only_global.history) == untimed(default.history)


def test_after_training_evaluates_the_model_a_client_keeps() -> None:
    """eval.when=after_training on a pathological partition: training is unchanged to the
    bit; in training rounds each client is judged on its locally trained model, which fits
    its own two classes far better than the global model it received; the final round
    (nothing trains) is the same either way. Measured on this machine, the smallest gain
    (of acc_mean) over the 4 training rounds, the narrow FedAvgCNN: 0.34 / 0.35 / 0.47 on
    seeds 0 / 1 / 2 (PFLlib's widths: 0.22 / 0.29 / 0.41); the control, evaluating at the
    round's start in both runs, gains 0."""
    _, start = run("rounds=4")
    _, after = run("rounds=4", "eval.when=after_training")
    for a, b in zip(start.history, after.history, strict=True):
        assert a.get("train_loss") == b.get("train_loss")
    assert torch.equal(start.state["params"], after.state["params"])
    gains = [
        b["acc_mean"] - a["acc_mean"]
        for a, b in zip(start.history[:4], after.history[:4], strict=True)
    ]
    print("after-training minus start, acc_mean per training round:", np.round(gains, 3))
    assert min(gains) > 0.15
    assert start.history[-1]["acc_weighted"] == after.history[-1]["acc_weighted"]


# -------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        ("eval.holdout_clients=10", ("eval.holdout_clients", "data.num_clients")),
        ("eval.holdout_clients=1.5", ("eval.holdout_clients",)),
        ("eval.finetune_epochs=2", ("eval.finetune_epochs", "eval.holdout_clients")),
        ("eval.model=global algorithm.name=local", ("eval.model", "algorithm.name=local")),
        ("eval.when=after_training asynchronous.enabled=true", ("eval.when", "asynchronous")),
        ("eval.when=after_training algorithm.name=spcacw", ("eval.when", "algorithm.name")),
    ],
)
def test_bad_eval_values_are_one_line_and_write_nothing(overrides, keys, capsys, tmp_path):
    line = refused_check(overrides, capsys, tmp_path)
    for key in keys:
        assert key in line, line


def test_a_newcomer_without_training_data_is_refused_where_its_rule_needs_some() -> None:
    """FedPer adapts a newcomer on its own train split: a held-out client with none is one
    line naming the key; FedAvg's rule (the global model) needs none."""
    from fedsim.algorithms.registry import ALGORITHMS
    from fedsim.rounds.evaluation import check_evaluation

    data = tiny_data()
    data.clients[4] = ClientSplit(np.zeros(0, np.int64), np.array([9]))
    held = hold_out(data, 1, seed=next(s for s in range(50) if held_out_ids(5, 1, s) == [4]))
    assert len(held.newcomers[0].train) == 0
    cfg = load_config(None, ["eval.holdout_clients=1", "algorithm.name=fedper"])
    with pytest.raises(ConfigError, match=r"eval.holdout_clients=1.*held-out client 4 has no"):
        check_evaluation(cfg, ALGORITHMS["fedper"], "local", held)
    check_evaluation(cfg, ALGORITHMS["fedavg"], "local", held)


GLOBAL_AS_IT_IS = ["fedavg", "fedavgm", "feddisco", "feddyn", "fednova", "fedprox", "fedvg",
                   "moon", "scaffold"]  # fmt: skip


@pytest.mark.parametrize("name", GLOBAL_AS_IT_IS)
def test_server_family_newcomers_get_the_global_model_untouched(name: str) -> None:
    """The FedAvg family's newcomer evaluates the broadcast's model itself: no training pass
    (a probe that refuses every call), nothing else read, whatever eval.finetune_epochs."""
    from helpers import client_info, federation

    from fedsim.algorithms.registry import ALGORITHMS

    class NoProbe:
        def __getattr__(self, attr):
            raise AssertionError(f"the global model's rule asked the probe for {attr}")

    cls = ALGORITHMS[name]
    fed = federation([("w", (3,)), ("b", (2,))], sizes=[4, 6])
    params = example_params(name)
    algorithm = cls(cls.Params(**params), fed)
    state = algorithm.init_state(torch.arange(5, dtype=torch.float32))
    broadcast = algorithm.broadcast(state)
    before = broadcast["params"].clone()
    info = client_info(fed, 1, round_idx=3, probe=NoProbe())
    info = dataclasses.replace(info, client=2)  # a held-out client: id num_clients
    got = algorithm.newcomer_params(broadcast, algorithm.newcomer_payload(state), info, 3)
    assert torch.equal(got, before) and torch.equal(broadcast["params"], before)
    assert cls.newcomer.rule == "the global model as it is" and not cls.newcomer.adapts


def test_summary_reports_rounds_and_virtual_time_to_each_target_accuracy(tmp_path: Path) -> None:
    """eval.target_acc in a synchronous run with a clock (system.speeds): summary.json
    gives the first evaluated round reaching each accuracy and its sim_time, as metrics.jsonl
    shows them; an unreachable target is null. The narrow FedAvgCNN reaches 0.2 in round
    2 / 1 / 1 on seeds 0 / 1 / 2 (0.40 / 0.34 / 0.34 at the end, measured on this machine)."""
    cfg = load_config(None, [*BASE, "data.partition.name=iid", "eval.target_acc=[0.2, 0.99]",
                             "system.speeds=slow_fraction:0.5,3"])  # fmt: skip
    result = run_experiment(cfg, tmp_path, progress=False, report=False)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    first = next(m for m in lines if m.get("acc_weighted", 0) >= 0.2)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rounds_to_acc"] == {"0.2": first["round"], "0.99": None}
    assert summary["time_to_acc"] == {"0.2": first["sim_time"], "0.99": None}
    assert first["sim_time"] > 0 and summary == result.summary
