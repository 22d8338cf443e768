"""Bytes up/down per round: what the algorithm's protocol moves, counted by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import quickstart

from fedsim.experiment import run_experiment
from fedsim.sizes import nbytes


def config(*overrides: str):
    return quickstart("data.num_clients=10", "join_ratio=0.3", *overrides)


def test_nbytes_counts_each_tensor_once():
    t = torch.zeros(10)  # 40 bytes
    a = np.zeros(3, dtype=np.float64)  # 24 bytes
    assert nbytes({"x": t, "y": [t, a], "z": "text", "w": 3.0}) == 64
    assert nbytes({"x": t, "y": t.clone()}) == 80


@pytest.mark.slow
def test_fedavg_moves_one_model_each_way_per_sampled_client(tmp_path):
    result = run_experiment(config("rounds=2"), tmp_path / "run", progress=False)
    model = 4 * result.state["params"].numel()
    for row in result.history[:2]:
        assert row["num_trained"] == 3
        assert row["bytes_down"] == row["bytes_up"] == 3 * model
    assert "bytes_up" not in result.history[2]  # the final round only evaluates


@pytest.mark.slow
def test_fedper_uploads_the_base_only_and_cwfedavg_one_model(tmp_path):
    fedper = run_experiment(
        config("rounds=1", "algorithm.name=fedper", "algorithm.personal_layers=1"),
        tmp_path / "fedper",
        progress=False,
    )
    model = 4 * 582026  # FedAvgCNN on 28x28 gray, 10 classes
    head = 4 * (512 * 10 + 10)
    assert fedper.history[0]["bytes_down"] == 3 * model
    assert fedper.history[0]["bytes_up"] == 3 * (model - head)

    cw = run_experiment(
        config("rounds=1", "algorithm.name=cwfedavg", "algorithm.classwise_layers=output"),
        tmp_path / "cw",
        progress=False,
    )
    # down: the shared model, K=10 copies of the head and the initial model's r (10 floats);
    # up: the model and r_i
    assert cw.history[0]["bytes_down"] == 3 * (model + 10 * head + 4 * 10)
    assert cw.history[0]["bytes_up"] == 3 * (model + 4 * 10)
