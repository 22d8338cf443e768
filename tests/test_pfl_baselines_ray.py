"""The ten personalization baselines on the Ray worker-actor pool give the local executor's
run to the bit: metrics of every round, the final server state and every client's state
(resume to the bit is the contract test's, tests/test_algorithm_contract.py, for every
registered algorithm). Tiny federations: 300 real digits, 4 clients, 2 rounds, the narrow
FedAvgCNN (FedBN: the narrow FedAvgCNNBN)."""

from __future__ import annotations

import pytest
import torch
from helpers import NARROW_CNN, run_local_and_ray, untimed

from fedsim.config import load_config

BASE = [
    "seed=0",
    "rounds=2",
    "data.name=mnist-5k",
    "data.max_samples=300",
    "data.num_clients=4",
    "data.partition.name=pathological",
    "data.partition.classes_per_client=2",
    "client.lr=0.05",
    "runtime.executor=local",
    "runtime.device=cpu",
    *NARROW_CNN,
]
TEN = {
    "fedrep": [],
    "lgfedavg": [],
    "fedbn": ["model.name=fedavg_cnn_bn"],
    "fedbabu": ["algorithm.finetune_epochs=1"],
    "fedrod": [],
    "apfl": [],
    "pfedme": ["algorithm.K=2"],
    "perfedavg": [],
    "moon": ["algorithm.mu=1"],
    "fednova": ["client.epochs_by_client=[1,2]"],
}
# one xdist worker runs the module: its ten Ray runs borrow one pool (conftest ``ray_pool``)
pytestmark = pytest.mark.xdist_group("pfl_baselines_ray")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TEN))
def test_ray_pool_equals_the_local_executor(name: str, ray_pool) -> None:
    cfg = load_config(None, [*BASE, f"algorithm.name={name}", *TEN[name]])
    local, ray_run = run_local_and_ray(cfg, ray_pool)
    try:
        assert untimed(ray_run.history) == untimed(local.history)
        assert [h.get("num_trained") for h in local.history[:2]] == [4, 4]
        for key, value in local.state.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, ray_run.state[key]), key
        for client in range(4):
            mine, theirs = local.client_store.get(client), ray_run.client_store.get(client)
            assert (mine is None) == (theirs is None), client
            if mine is not None:
                for key, value in mine.items():
                    if isinstance(value, torch.Tensor):
                        assert torch.equal(value, theirs[key]), (client, key)
    finally:
        local.client_store.close()
        ray_run.client_store.close()
