"""SP-CACW's effect on real data (issue 15): relabelled mnist-5k, 4 label-permutation clusters.

Target client 0 against Local-only and FedAvg on the same data, rounds, learning rate and
batch size (``OVERRIDES``: 2,000 digits, 8 IID clients, 2 per cluster, 8 rounds, lr 0.05,
batch 10, seed 1). SP-CACW runs with

- the paper's practical choices for deep nets: a constant EMA rate (``beta=0.1``) and
  ``T_start=60`` (the objective's sums start in round 3; before, every cluster's gradient
  at the young model looks alike);
- ``bias_term=linear`` and ``variance_term=centred`` (docs/algorithms.md, "spcacw"): the
  objective whose minimiser is the paper's closed-form alpha_i = [(lambda - C1 ||b_i||^2) /
  (2 C2 sigma_i^2)]_+, a hard threshold on each peer's bias. Not the defaults, which keep
  the paper's practical objective as written.

Measured in this setting (``benchmarks/spcacw_variance.py``; target 0's final alpha,
weight on its own cluster {0, 4}, other-cluster peers at exactly 0, accuracy on its 63 test
digits):

| objective | beta, T_start | own cluster | others == 0 | accuracy |
|---|---|---|---|---|
| seed's (quadratic bias, raw variance) | 1/t, 1 (defaults) | 0.379 | 0 of 6 | 0.508 |
| quadratic bias, centred variance | 1/t, 1 | 0.365 | 0 of 6 | 0.508 |
| linear bias, centred variance | 1/t, 1 | 0.451 | 0 of 6 | 0.556 |
| seed's (quadratic bias, raw variance) | 0.1, 60 | 0.907 | 0 of 6 | 0.905 |
| quadratic bias, centred variance | 0.1, 60 | 0.907 | 0 of 6 | 0.905 |
| linear bias, raw variance | 0.1, 60 | 1.000 | 6 of 6 | 0.889 |
| linear bias, centred variance (this test) | 0.1, 60 | 1.000 | 6 of 6 | 0.889 |

Local-only 0.889, FedAvg 0.333. Centring the variance term alone changes almost nothing:
the other clusters' gradient second moments halve (their mean parts go) and their
correlation with the target's turns from slightly negative to slightly positive, but what
keeps them at small positive weights is the quadratic bias term ||sum_i alpha_i b_i||^2,
whose slope at alpha_i = 0 is 2 <b_i, sum_j alpha_j b_j>, near 0 when the mix is
own-cluster: any peer with independent noise then lowers the variance term for free. The
linear (Jensen) bias term charges each peer ||b_i||^2 from the first unit of weight, so
peers above the threshold get exactly 0, with the raw variance term as well. Here that
costs the quadratic objective's 0.905 one test digit, and it does not beat Local-only
either (56 of 63 digits each): that assertion is an expected failure.

SP-CACW ~60-90 s on an idle core (8 rounds, 19 steps each, 8 gradients a step, L by HVPs
every round), Local and FedAvg ~20-25 s each; the module took 407 s on a loaded machine
(load 9 on 2 cores; SP-CACW 307 s of it)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from fedsim.algorithms.simplex import solve_leader
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
# the paper's practical choices for deep nets (a constant EMA rate that tracks the drifting
# bias; T_start past the first rounds) and the closed form's objective (module docstring)
SPCACW = [
    f"algorithm.targets={TARGET}",
    "algorithm.beta=0.1",
    "algorithm.T_start=60",
    "algorithm.bias_term=linear",
    "algorithm.variance_term=centred",
]


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
    print(f"spcacw: alpha {np.round(alpha, 4).tolist()}")
    return alpha, np.asarray(clusters) == clusters[TARGET]


@pytest.mark.slow
def test_target_weights_only_its_own_cluster():
    _, state, clusters = relabel_run("spcacw", *SPCACW)
    alpha, own = own_cluster(state, clusters)
    assert alpha[own].sum() >= 0.9, alpha
    assert (alpha[~own] == 0).all(), alpha  # exactly 0, not small


@pytest.mark.slow
def test_the_seeds_quadratic_bias_term_keeps_other_clusters_positive():
    """On the same run's running matrices, the seed's objective alpha^T (A + L V) alpha keeps
    most other-cluster peers at small positive weights (measured: 5 of 6, 0.003-0.023, 0.062
    in all): the gap the linear term closes."""
    _, state, clusters = relabel_run("spcacw", *SPCACW)
    _, own = own_cluster(state, clusters)
    q = state["bias_gram"][0] + state["lipschitz"][0] * state["grad_gram"][0]
    alpha = solve_leader(q, 0.0, np.eye(len(q))[TARGET])
    print(f"quadratic bias term: alpha {np.round(alpha, 4).tolist()}")
    others = alpha[~own]
    assert (others > 0).sum() >= 4 and 0.03 < others.sum() < 0.2, alpha


@pytest.mark.slow
def test_target_beats_fedavg():
    accuracy, _, _ = relabel_run("spcacw", *SPCACW)
    fedavg, _, _ = relabel_run("fedavg")
    assert accuracy > fedavg, (accuracy, fedavg)


@pytest.mark.slow
@pytest.mark.xfail(reason="ties Local-only here: 56 of 63 test digits each (module docstring)")
def test_target_beats_local():
    accuracy, _, _ = relabel_run("spcacw", *SPCACW)
    local, _, _ = relabel_run("local")
    assert accuracy > local, (accuracy, local)
