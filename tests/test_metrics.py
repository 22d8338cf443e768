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
