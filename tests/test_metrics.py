"""Accuracy summaries against hand computations."""

import numpy as np
import pytest

from fedsim.metrics import best_and_final, summarize_clients


def test_summary_by_hand():
    correct = np.array([9, 1, 30, 5, 5, 5, 5, 5, 5, 5, 5])
    n = np.array([10, 10, 40, 10, 10, 10, 10, 10, 10, 10, 10])
    s = summarize_clients(correct, n, loss_sum=np.full(11, 2.0))
    per_client = correct / n
    assert s["acc_weighted"] == pytest.approx(80 / 140)
    assert s["acc_mean"] == pytest.approx(per_client.mean())
    assert s["acc_std"] == pytest.approx(per_client.std())
    assert s["acc_worst10"] == pytest.approx((0.1 + 0.5) / 2)  # ceil(10% of 11) = 2 clients
    assert s["loss"] == pytest.approx(22 / 140)


def test_best_and_final():
    history = [
        {"round": 0, "acc_weighted": 0.2, "acc_mean": 0, "acc_std": 0, "acc_worst10": 0, "loss": 1},
        {"round": 1, "num_trained": 3},
        {"round": 2, "acc_weighted": 0.9, "acc_mean": 0, "acc_std": 0, "acc_worst10": 0, "loss": 1},
        {"round": 3, "acc_weighted": 0.5, "acc_mean": 0, "acc_std": 0, "acc_worst10": 0, "loss": 1},
    ]
    out = best_and_final(history)
    assert out["best"]["round"] == 2 and out["final"]["round"] == 3


def test_time_to_accuracy_is_the_first_round_reaching_each_target_by_hand() -> None:
    """Rounds 0, 2, 4 evaluated at 0.3, 0.75, 0.7 (sim_time 0, 5, 9): 0.5 is first reached
    at round 2 (time 5), 0.75 too (>=), 0.9 never; a run without a clock has no times."""
    from fedsim.metrics import time_to_accuracy

    history = [
        {"round": 0, "acc_weighted": 0.3, "sim_time": 0.0},
        {"round": 1, "train_loss": 1.0, "sim_time": 2.0},
        {"round": 2, "acc_weighted": 0.75, "sim_time": 5.0},
        {"round": 4, "acc_weighted": 0.7, "sim_time": 9.0},
    ]
    out = time_to_accuracy(history, [0.5, 0.75, 0.9])
    assert out == {
        "rounds_to_acc": {"0.5": 2, "0.75": 2, "0.9": None},
        "time_to_acc": {"0.5": 5.0, "0.75": 5.0, "0.9": None},
    }
    no_clock = [{k: v for k, v in h.items() if k != "sim_time"} for h in history]
    assert time_to_accuracy(no_clock, [0.5]) == {"rounds_to_acc": {"0.5": 2}}
    assert time_to_accuracy(history, []) == {}
