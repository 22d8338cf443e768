"""SP-CACW's effect on real data (issue 15): relabelled mnist-5k, 4 label-permutation clusters.

Targets 0 and 1 (clusters 0 and 1) against Local-only and FedAvg on the same data, rounds,
learning rate and batch size (``OVERRIDES``: 3,000 digits, 12 IID clients, 3 per cluster,
half of each client's 250 digits for training and half for its test split, 8 rounds,
lr 0.05, batch 10, seed 1). SP-CACW runs with

- the paper's practical choices for deep nets: a constant EMA rate (``beta=0.1``) and
  ``T_start=60`` (the objective's sums start in round 5; before, every cluster's gradient
  at the young model looks alike);
- ``bias_term=linear`` and ``variance_term=centred`` (docs/algorithms.md, "spcacw"): the
  objective whose minimiser is the paper's closed-form alpha_i = [(lambda - C1 ||b_i||^2) /
  (2 C2 sigma_i^2)]_+, a hard threshold on each peer's bias. Not the defaults, which keep
  the paper's practical objective as written (they do not concentrate the weights at this
  scale: ``benchmarks/spcacw_variance.py``, ``benchmarks/results/spcacw.md``);
- ``lipschitz_every=2``: L by HVPs in rounds 4 and 6 (the first whose steps reach T_start,
  then every other), kept between; with L every round the run cost ~30 % more for the
  same claims (seeds 0-3: 0.769 / 0.855 / 0.855 / 0.803 against the same Local-only).

This setting was found on a smaller federation (8 clients, 2 per cluster, 1,500 train
digits; ``benchmarks/spcacw_variance.py``) and not changed for this one (but for
``lipschitz_every``). There SP-CACW tied
Local-only at the final round (56 of 63 test digits each): with 2 clients per cluster a
target has one peer to learn from and 63 test digits to show it. Here each target has two
same-cluster peers and 125 test images. The accuracy compared is the mean over the two
targets and the last 3 rounds (6-8): at lr 0.05 a client's test accuracy on 125 images
swings by up to 10 points from one round to the next, for every method.

Measured, seeds 0-3 (mean over targets 0, 1 and rounds 6-8): SP-CACW 0.776 / 0.852 /
0.860 / 0.799, Local-only 0.687 / 0.689 / 0.773 / 0.651 (ahead by 8.7-16 points; at the
final round alone too: 0.816 / 0.800 / 0.884 / 0.848 against 0.796 / 0.748 / 0.780 /
0.716); FedAvg 0.24-0.33. Each target ends with all of its weight on its own cluster and
exactly 0 on the 9 other-cluster peers, in every seed; the quadratic bias term leaves 10-15
other-cluster weights positive over the two targets.
SP-CACW ~33 CPU-s (8 rounds, 13 steps each, 2 x 12 gradients a step, L by HVPs in rounds 4
and 6; 43 with L every round), FedAvg ~10 s, Local ~2 s (only the targets train and only
they are evaluated, in every run: ``only_targets``).

The faithful path (issue 26; ``FAITHFUL``): SP-CACW's defaults as the paper writes them
(beta 1/t, T_start 1, the quadratic objective), on the independent check's setting
(``configs/spcacw/mnist5k-relabel-mlp.yaml``: 20 clients of 250 relabelled digits, MLP
784-200-200-10) made cheaper (4 targets, one per cluster, and 6 rounds instead of 20 and 20),
with the standard MNIST pixels (``data.normalize=standard``) and ``L_history=per_step``. Over
rounds 4-6 the targets average, SP-CACW against Local-only, seeds 0-3: 0.795 / 0.745,
0.787 / 0.737, 0.833 / 0.750, 0.778 / 0.728 (ahead by 5-8 points in each), with 0.67-0.73
of each target's weight on its own cluster at the least. With 8 targets (two per cluster)
the same seeds gave 0.792 / 0.729, 0.808 / 0.755, 0.819 / 0.766, 0.812 / 0.750 and 0.65-0.78,
for ~47 CPU-s of the two runs instead of ~30: the suite keeps the cheaper one. The gap is largest
in these early rounds: over 20 rounds and all 20 targets the best rounds differ by ~3 points
(benchmarks/results/spcacw.md). With PFLlib's pixels (the default, x / 127.5 - 1) the same
defaults spread their weights over every cluster and fall far behind Local-only (same file).
~30 s.
"""

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

TARGETS = (0, 1)
ROUNDS = 8
LAST = 3  # rounds averaged for the accuracy comparison (module docstring)
OVERRIDES = [
    "seed=1",
    f"rounds={ROUNDS}",
    "eval_every=1",
    "data.name=mnist-5k",
    "data.max_samples=3000",
    "data.num_clients=12",
    "data.train_ratio=0.5",
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
    f"algorithm.targets=[{','.join(map(str, TARGETS))}]",
    "algorithm.beta=0.1",
    "algorithm.T_start=60",
    "algorithm.bias_term=linear",
    "algorithm.variance_term=centred",
    "algorithm.lipschitz_every=2",  # L in rounds 4 and 6 (module docstring)
]


def only_targets(simulation: Simulation, targets: tuple[int, ...]) -> None:
    """Evaluate only the targets (the rest is never read); Local-only trains only them too.
    A client's training and evaluation do not depend on the others' (its batches and seeds
    come from (seed, round, client)): the targets' numbers are the full run's to the bit
    (checked once with every client). FedAvg still trains every client: they all shape the
    global model."""
    simulation.algorithm.evaluates = lambda client: client in targets  # type: ignore[method-assign]
    if simulation.cfg.algorithm.name == "local":
        simulation.sample_cohort = lambda round_idx: list(targets)  # type: ignore[method-assign]


@functools.cache
def targets_run(
    base: tuple[str, ...], targets: tuple[int, ...], algorithm: str, *extra: str
) -> tuple[np.ndarray, dict, np.ndarray]:
    """(accuracy per evaluated round x target, final server state, true clusters) of one
    local run of ``base`` with ``algorithm`` and ``extra`` on top."""
    torch.set_num_threads(1)
    cfg = load_config(None, [*base, f"algorithm.name={algorithm}", *extra])
    simulation = Simulation(cfg)
    simulation.worker_spec.num_threads = 1
    only_targets(simulation, targets)
    sink = MemorySink()
    with LocalExecutor(simulation.worker_spec, simulation.data) as executor:
        result = simulation.run(executor, [sink])
    accuracy = np.array(
        [
            [{c.client: c.accuracy for c in record.clients}[t] for t in targets]
            for record in sink.records
            if record.clients
        ]
    )
    print(f"{algorithm}: targets {list(targets)} accuracy per round {accuracy.mean(1).round(3)}")
    return accuracy, result.state, np.asarray(simulation.federation.client_clusters)


def relabel_run(algorithm: str, *extra: str) -> tuple[np.ndarray, dict, np.ndarray]:
    """``targets_run`` on the 10-client relabel federation."""
    return targets_run(tuple(OVERRIDES), tuple(TARGETS), algorithm, *extra)


def late_accuracy(algorithm: str, *extra: str) -> float:
    """Mean accuracy over the targets and the last ``LAST`` rounds."""
    accuracy, _, _ = relabel_run(algorithm, *extra)
    assert len(accuracy) == ROUNDS + 1  # round 0 (before training) .. ROUNDS
    return float(accuracy[-LAST:].mean())


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(TARGETS)))
def test_each_target_weights_only_its_own_cluster(index):
    _, state, clusters = relabel_run("spcacw", *SPCACW)
    alpha = state["alpha"][index]
    own = clusters == clusters[TARGETS[index]]
    print(f"target {TARGETS[index]}: alpha {np.round(alpha, 4).tolist()}")
    assert alpha[own].sum() >= 0.9, alpha
    assert (alpha[~own] == 0).all(), alpha  # exactly 0, not small


@pytest.mark.slow
def test_the_seeds_quadratic_bias_term_keeps_other_clusters_positive():
    """On the same run's running matrices, the seed's objective alpha^T (A + L V) alpha leaves
    other-cluster peers at small positive weights: the gap the linear term closes."""
    _, state, clusters = relabel_run("spcacw", *SPCACW)
    positive = []
    for index, target in enumerate(TARGETS):
        q = state["bias_gram"][index] + state["lipschitz"][index] * state["grad_gram"][index]
        alpha = solve_leader(q, 0.0, np.eye(len(q))[target])
        print(f"target {target}, quadratic bias term: alpha {np.round(alpha, 4).tolist()}")
        positive.append(int((alpha[clusters != clusters[target]] > 0).sum()))
    assert sum(positive) >= 4, positive


@pytest.mark.slow
def test_targets_beat_fedavg():
    spcacw, fedavg = late_accuracy("spcacw", *SPCACW), late_accuracy("fedavg")
    assert spcacw > fedavg + 0.3, (spcacw, fedavg)


@pytest.mark.slow
def test_targets_beat_local():
    spcacw, local = late_accuracy("spcacw", *SPCACW), late_accuracy("local")
    assert spcacw > local + 0.05, (spcacw, local)


# ------------------------------------------------------------------ the faithful path

FAITHFUL_TARGETS = tuple(range(4))  # one per cluster (client k in cluster k % 4)
FAITHFUL_ROUNDS = 6
FAITHFUL = [
    "seed=0",
    f"rounds={FAITHFUL_ROUNDS}",
    "eval_every=1",
    "data.name=mnist-5k",
    "data.num_clients=20",
    "data.partition.name=relabel",
    "data.partition.clusters=4",
    "data.normalize=standard",
    "model.name=mlp",
    "client.lr=0.05",
    "client.batch_size=10",
    "checkpoint_every=0",
    "runtime.executor=local",
    "runtime.device=cpu",
]


def faithful_run(algorithm: str, *extra: str) -> tuple[np.ndarray, dict]:
    """(accuracy per evaluated round x target, final server state) on the check's setting."""
    accuracy, state, _ = targets_run(tuple(FAITHFUL), tuple(FAITHFUL_TARGETS), algorithm, *extra)
    return accuracy, state


@pytest.mark.slow
def test_the_defaults_beat_local_with_the_standard_pixels_and_l_eta_per_step():
    targets = ",".join(map(str, FAITHFUL_TARGETS))
    spcacw, state = faithful_run(
        "spcacw", f"algorithm.targets=[{targets}]", "algorithm.L_history=per_step"
    )
    local, _ = faithful_run("local")
    assert len(spcacw) == FAITHFUL_ROUNDS + 1
    late_spcacw, late_local = spcacw[-LAST:].mean(), local[-LAST:].mean()
    assert late_spcacw > late_local + 0.03, (late_spcacw, late_local)
    clusters = np.arange(20) % 4
    own = [state["alpha"][k][clusters == clusters[t]].sum() for k, t in enumerate(FAITHFUL_TARGETS)]
    print(f"own-cluster weight per target {np.round(own, 3).tolist()}")
    assert min(own) >= 0.6, own
