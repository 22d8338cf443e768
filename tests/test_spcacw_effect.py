"""SP-CACW's effect on real data (issue 15): relabelled mnist-5k, 4 label-permutation clusters.

Target client 0 against Local-only and FedAvg on the same data, rounds, learning rate and
batch size (``OVERRIDES``: 2,000 digits, 8 IID clients, 2 per cluster, 8 rounds, lr 0.05,
batch 10, seed 1). SP-CACW runs with the paper's practical choices for deep nets: a constant
EMA rate (``beta=0.1``) and ``T_start=60`` (the objective's sums start in round 3; before,
every cluster's gradient at the young model looks alike, and with T_start=1 those terms keep
the weights spread: own-cluster mass 0.46 after 8 rounds and accuracy 0.556 with beta=0.1;
0.38 and 0.508 with the defaults beta=1/t, T_start=1; Local-only 0.889).

Measured (this setting): client 0's final accuracy SP-CACW 0.921, Local-only 0.889, FedAvg
0.317 (63 test digits: 2 digits over Local); alpha [0.535, 0.011, 0.010, 0.013, 0.372, 0.002,
0.030, 0.028], own-cluster mass 0.907; SP-CACW ~95 s on an idle core (8 rounds, 19 steps
each, 8 gradients a step, L by HVPs every round), Local and FedAvg ~25 s each.

Not reached: peers of the other clusters end at 0.002-0.030, not exactly 0. The practical
objective's variance term L eta ||sum_i alpha_i g_i||^2 (L eta ~ 0.7 here: the estimated
sharpness grows towards 2 / eta during training) rewards mixing in peers whose gradients
oppose the target's, so the minimiser keeps them at small positive weights; that test is an
expected failure, kept to show the gap.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from fedsim.config import load_config
from fedsim.runtime.executor import LocalExecutor
from fedsim.simulation import Simulation
from fedsim.tracking.base import MemorySink

TARGET = 0
ROUNDS = 8
OVERRIDES = [
    "seed=1",
    f"rounds={ROUNDS}",
    f"eval_every={ROUNDS}",
    "data.name=mnist-5k",
    "data.max_samples=2000",
    "data.num_clients=8",
    "data.partition.name=relabel",
    "data.partition.clusters=4",
    "client.lr=0.05",
    "client.batch_size=10",
    "join_ratio=1.0",
    "checkpoint_every=0",
    "runtime.executor=local",
    "runtime.device=cpu",
]
# the paper's practical choices for deep nets: a constant EMA rate (it tracks the drifting
# bias) and T_start past the first rounds, where every cluster's gradient still looks alike
SPCACW = [f"algorithm.targets={TARGET}", "algorithm.beta=0.1", "algorithm.T_start=60"]


@functools.cache
def relabel_run(algorithm: str, *extra: str) -> tuple[float, dict, list[int]]:
    """(target's final accuracy, final server state, true clusters) of ``algorithm``."""
    torch.set_num_threads(1)
    cfg = load_config(None, [*OVERRIDES, f"algorithm.name={algorithm}", *extra])
    simulation = Simulation(cfg)
    simulation.worker_spec.num_threads = 1
    sink = MemorySink()
    with LocalExecutor(simulation.worker_spec, simulation.data) as executor:
        result = simulation.run(executor, [sink])
    (row,) = [c for c in sink.records[-1].clients if c.client == TARGET]
    print(f"{algorithm}: client {TARGET} final accuracy {row.accuracy:.3f}")
    return row.accuracy, result.state, list(simulation.federation.client_clusters)


def own_cluster(state: dict, clusters: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(the target's final alpha, mask of its own cluster's clients)."""
    alpha = state["alpha"][0]
    print(f"spcacw: alpha {np.round(alpha, 3).tolist()}")
    return alpha, np.asarray(clusters) == clusters[TARGET]


@pytest.mark.slow
def test_target_weights_its_own_cluster_and_beats_local_and_fedavg():
    accuracy, state, clusters = relabel_run("spcacw", *SPCACW)
    alpha, own = own_cluster(state, clusters)
    local, _, _ = relabel_run("local")
    fedavg, _, _ = relabel_run("fedavg")
    assert alpha[own].sum() >= 0.9, alpha
    assert accuracy > local and accuracy > fedavg, (accuracy, local, fedavg)


@pytest.mark.slow
@pytest.mark.xfail(reason="other clusters' peers end at 0.002-0.030, not 0 (module docstring)")
def test_other_clusters_end_at_exactly_zero():
    _, state, clusters = relabel_run("spcacw", *SPCACW)
    alpha, own = own_cluster(state, clusters)
    assert (alpha[~own] == 0).all(), alpha
