"""Attacks (fedsim/deployment/attacks.py): who attacks, what each attack sends, and where the
run folder records the attackers (partition.json, clients.csv)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from helpers import NARROW_CNN

from fedsim.config import AttackConfig, load_config
from fedsim.deployment.attacks import LabelFlipped, attackers, corrupt_delta
from fedsim.experiment import run_experiment

TINY = [
    "rounds=1",
    "data.name=mnist-5k",
    "data.max_samples=400",
    "data.num_clients=5",
    "data.partition.name=iid",
    "client.lr=0.05",
    "runtime.executor=local",
    "runtime.device=cpu",
    *NARROW_CNN,  # the runs check who attacks and when, not the net
]


def test_attackers_are_a_seeded_fraction_of_the_clients():
    settings = AttackConfig(kind="sign_flip", fraction=0.2)
    chosen = attackers(settings, 20, seed=0)
    assert len(chosen) == 4 and chosen == sorted(set(chosen))
    assert attackers(settings, 20, seed=0) == chosen
    assert attackers(settings, 20, seed=1) != chosen
    assert attackers(AttackConfig(kind="none", fraction=0.5), 20, seed=0) == []
    assert len(attackers(AttackConfig(kind="scale", fraction=0.25), 10, seed=0)) == 2  # round(2.5)


def test_model_poisoning_attacks_on_the_delta():
    delta = torch.tensor([3.0, -4.0])
    assert corrupt_delta("sign_flip", delta, 4.0, [0]).tolist() == [-12.0, 16.0]
    assert corrupt_delta("scale", delta, 2.5, [0]).tolist() == [7.5, -10.0]
    assert torch.equal(corrupt_delta("label_flip", delta, 4.0, [0]), delta)
    big = torch.ones(40000)  # norm 200
    noise = corrupt_delta("gaussian", big, 3.0, [0, 1, 2])
    assert noise.norm().item() == pytest.approx(3.0 * 200, rel=0.02)
    assert abs(float(noise.mean())) < 0.1  # no longer the update's direction
    assert torch.equal(corrupt_delta("gaussian", big, 3.0, [0, 1, 2]), noise)  # seeded


def test_label_flip_view_maps_y_to_k_minus_1_minus_y():
    class Data:
        num_classes = 10

        def batch(self, indices):
            return torch.zeros(len(indices), 1), torch.as_tensor(indices)

    flipped = LabelFlipped(Data(), 10)
    x, y = flipped.batch(np.array([0, 3, 9]))
    assert y.tolist() == [9, 6, 0] and x.shape == (3, 1)
    assert flipped.num_classes == 10  # everything else is the data's


@pytest.mark.slow
def test_run_folder_records_the_attackers(tmp_path):
    torch.set_num_threads(1)  # as a worker does: more threads on a busy CPU only spin
    cfg = load_config(None, [*TINY, "attack.kind=sign_flip", "attack.fraction=0.4"])
    result = run_experiment(cfg, tmp_path / "run", progress=False, report=False)
    expected = attackers(cfg.attack, 5, cfg.seed)
    partition = json.loads((tmp_path / "run" / "partition.json").read_text())
    assert partition["attacked_clients"] == expected
    assert [c["client"] for c in partition["clients"] if c["attacked"]] == expected
    with open(tmp_path / "run" / "clients.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {int(r["client"]) for r in rows if r["attacked"] == "True"} == set(expected)
    assert result.history[0]["attackers"] == expected  # full participation: all attack


@pytest.mark.slow
def test_label_flip_changes_training_from_start_round_only(tmp_path):
    torch.set_num_threads(1)

    def final(*extra: str) -> torch.Tensor:
        cfg = load_config(None, [*TINY, *extra])
        out = tmp_path / "-".join(extra or ("clean",))
        return run_experiment(cfg, out, progress=False, report=False).state["params"]

    clean = final()
    assert torch.equal(final("attack.kind=label_flip", "attack.start_round=1"), clean)
    assert not torch.equal(final("attack.kind=label_flip"), clean)


def test_a_label_flipper_s_statistics_are_of_the_labels_it_trains_on(tmp_path):
    """FedRoD's balanced softmax adds log n_c of the client's class counts: with 2 classes a
    client, a flipped label (K-1-y) is a class its true counts lack, and the loss was
    infinite (the run diverged). The attacker's data has the flipped labels, so its counts
    are the flipped ones, and it trains on finite losses."""
    cfg = load_config(None, [*TINY, "data.partition.name=pathological",
                             "algorithm.name=fedrod", "attack.kind=label_flip",
                             "attack.fraction=0.4"])  # fmt: skip
    result = run_experiment(cfg, tmp_path / "run", progress=False, report=False)
    assert result.history[0]["attackers"]  # the attackers trained this round
    assert all(np.isfinite(h["train_loss"]) for h in result.history[:-1])
    assert result.summary["status"] == "completed"
