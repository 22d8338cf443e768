"""SP-CACW's variance term, raw (the seed's) against centred, on the effect test's setting.

    python benchmarks/spcacw_variance.py                      # the four rows below
    python benchmarks/spcacw_variance.py --rows centred-b01   # some of them
    python benchmarks/spcacw_variance.py --extra algorithm.reg=true

The setting (``OVERRIDES``): relabelled mnist-5k, 2,000 digits, 8 IID clients in 4
label-permutation clusters (2 per cluster), target 0, 8 rounds, lr 0.05, batch 10, seed 1;
the "linear-centred-b01" row is the setting ``tests/test_spcacw_effect.py`` runs on its own
(larger) federation.
Per row it prints the target's final alpha, the weight on its own cluster, how many peers
of other clusters end with alpha exactly 0 and below 1e-6, the mean L, and the target's
final accuracy; Local-only and FedAvg on the same data with ``--baselines``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fedsim.config import load_config  # noqa: E402
from fedsim.runtime.executor import LocalExecutor  # noqa: E402
from fedsim.simulation import Simulation  # noqa: E402
from fedsim.tracking.base import MemorySink  # noqa: E402

TARGET = 0
OVERRIDES = [
    "seed=1",
    "rounds=8",
    "eval_every=8",
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
SEEDS_DEFAULTS = ["algorithm.beta=1/t", "algorithm.T_start=1"]
PRACTICAL = ["algorithm.beta=0.1", "algorithm.T_start=60"]
ROWS = {
    "raw-defaults": SEEDS_DEFAULTS,
    "centred-defaults": [*SEEDS_DEFAULTS, "algorithm.variance_term=centred"],
    "raw-b01": PRACTICAL,
    "centred-b01": [*PRACTICAL, "algorithm.variance_term=centred"],
    "linear-raw-defaults": [*SEEDS_DEFAULTS, "algorithm.bias_term=linear"],
    "linear-centred-defaults": [
        *SEEDS_DEFAULTS,
        "algorithm.bias_term=linear",
        "algorithm.variance_term=centred",
    ],
    "linear-raw-b01": [*PRACTICAL, "algorithm.bias_term=linear"],
    "linear-centred-b01": [
        *PRACTICAL,
        "algorithm.bias_term=linear",
        "algorithm.variance_term=centred",
    ],
}


def run(algorithm: str, overrides: list[str]) -> tuple[float, dict, list[int], list[dict]]:
    """(target's final accuracy, final state, true clusters, round records) of one run."""
    torch.set_num_threads(1)
    extra = [f"algorithm.targets={TARGET}"] if algorithm == "spcacw" else []
    cfg = load_config(None, [*OVERRIDES, f"algorithm.name={algorithm}", *extra, *overrides])
    simulation = Simulation(cfg)
    simulation.worker_spec.num_threads = 1
    sink = MemorySink()
    with LocalExecutor(simulation.worker_spec, simulation.data) as executor:
        result = simulation.run(executor, [sink])
    (row,) = [c for c in sink.records[-1].clients if c.client == TARGET]
    return row.accuracy, result.state, list(simulation.federation.client_clusters), result.history


def describe(name: str, overrides: list[str]) -> str:
    """One result line for an SP-CACW row."""
    began = time.perf_counter()
    accuracy, state, clusters, history = run("spcacw", overrides)
    alpha = state["alpha"][0]
    own = np.asarray(clusters) == clusters[TARGET]
    lipschitz = [h["lipschitz"] for h in history if "lipschitz" in h]
    return (
        f"{name}: acc {accuracy:.3f} own-cluster {alpha[own].sum():.3f} "
        f"others ==0: {int((alpha[~own] == 0).sum())}/{int((~own).sum())} "
        f"<1e-6: {int((alpha[~own] < 1e-6).sum())} max-other {alpha[~own].max():.4f} "
        f"L {np.mean(lipschitz):.1f} alpha {np.round(alpha, 4).tolist()} "
        f"({time.perf_counter() - began:.0f} s) {' '.join(overrides)}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="*", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--extra", nargs="*", default=[], help="overrides added to every row")
    parser.add_argument("--baselines", action="store_true", help="also Local-only and FedAvg")
    args = parser.parse_args(argv)
    for name in args.rows:
        print(describe(name, [*ROWS[name], *args.extra]), flush=True)
    if args.baselines:
        for algorithm in ("local", "fedavg"):
            print(f"{algorithm}: acc {run(algorithm, [])[0]:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
