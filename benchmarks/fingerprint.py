"""Bit-level fingerprint of every registered algorithm: a refactor must leave it unchanged.

Runs each algorithm (and the FedAvg-family weightings) for a few rounds on mnist-5k with the
local executor and prints one line per run: the SHA-256 of the round summaries (wall-clock
keys dropped) and of the final server state's tensors. Compare two checkouts with

    python benchmarks/fingerprint.py > before.txt   # on the old commit
    python benchmarks/fingerprint.py > after.txt    # on the new one
    diff before.txt after.txt
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from typing import Any

import torch

from fedsim.config import load_config
from fedsim.experiment import run_experiment

TIMING_KEYS = ("seconds", "train_seconds_max_worker")

RUNS: dict[str, list[str]] = {
    "fedavg": ["algorithm.name=fedavg"],
    "local": ["algorithm.name=local"],
    "cwfedavg": ["algorithm.name=cwfedavg", "algorithm.wdr_lambda=0.01"],
    "fedper": ["algorithm.name=fedper"],
    "ditto": ["algorithm.name=ditto"],
    "fedamp": ["algorithm.name=fedamp"],
    "fedfomo": ["algorithm.name=fedfomo"],
    "fedvg": ["algorithm.name=fedvg"],
    "fedprox": ["algorithm.name=fedprox", "algorithm.mu=0.01"],
    "fedprox-vg": ["algorithm.name=fedprox", "algorithm.mu=0.01", "algorithm.weighting=fedvg"],
    "scaffold": ["algorithm.name=scaffold"],
    "feddyn": ["algorithm.name=feddyn"],
    "fedavgm": ["algorithm.name=fedavgm"],
    "fedavgm-avg": ["algorithm.name=fedavgm", "algorithm.weighting=avg"],
    "feddisco": ["algorithm.name=feddisco"],
    "ifca": ["algorithm.name=ifca"],
    "fc": ["algorithm.name=fc"],
    "oracle": ["algorithm.name=oracle", "data.partition.name=relabel", "data.partition.alpha=0.1"],
    "spcacw": [
        "algorithm.name=spcacw",
        "algorithm.targets=[0,3]",
        "algorithm.participation=0.7",
        "join_ratio=1",
    ],  # peers join a step by participation, never by join_ratio
    "async": ["asynchronous.enabled=true", "asynchronous.speeds=lognormal:0,0.5"],
    "dp-local": ["privacy.mode=local", "privacy.clip_norm=1.0", "privacy.noise_multiplier=0.1"],
    "dp-central": ["privacy.mode=central", "privacy.clip_norm=1.0", "privacy.noise_multiplier=0.1"],
    "topk-krum": ["compression.kind=topk", "compression.fraction=0.1", "aggregation.rule=median"],
    "attack": ["attack.kind=sign_flip", "attack.fraction=0.3"],
    "fedper-clip": ["algorithm.name=fedper", "privacy.clip_norm=0.5"],
    "sync-speeds": ["asynchronous.speeds=slow_fraction:0.3,4"],
    # the ten baselines of the second wave (their terms and own loops run in the worker too)
    "fedrep": ["algorithm.name=fedrep"],
    "lgfedavg": ["algorithm.name=lgfedavg"],
    "fedbn": ["algorithm.name=fedbn", "model.name=fedavg_cnn_bn"],
    "fedbabu": ["algorithm.name=fedbabu"],
    "fedrod": ["algorithm.name=fedrod"],
    "apfl": ["algorithm.name=apfl"],
    "pfedme": ["algorithm.name=pfedme"],
    "perfedavg": ["algorithm.name=perfedavg"],
    "moon": ["algorithm.name=moon"],
    "fednova": ["algorithm.name=fednova", "client.epochs_by_client=[1,2]"],
    # every upload stage and server rule on its own and together (issue 35's pipeline)
    "krum-filter": [
        "aggregation.rule=multikrum",
        "aggregation.krum_f=0",
        "aggregation.anomaly_cosine=0.0",
    ],
    "trimmed": ["aggregation.rule=trimmed_mean", "aggregation.trim=0.25", "join_ratio=1"],
    "dp-adaptive": [
        "privacy.mode=local",
        "privacy.clip_norm=1.0",
        "privacy.adaptive=true",
        "privacy.noise_multiplier=0.1",
    ],
    "dp-sigma": ["privacy.mode=fixed_sigma", "privacy.clip_norm=1.0", "privacy.sigma=0.01"],
    "topk-ef": [
        "compression.kind=topk",
        "compression.fraction=0.1",
        "compression.error_feedback=true",
        "rounds=3",
    ],
    "label-flip": ["attack.kind=label_flip", "attack.fraction=0.3"],
    "async-dp": [
        "asynchronous.enabled=true",
        "privacy.mode=central",
        "privacy.clip_norm=1.0",
        "privacy.noise_multiplier=0.1",
        "attack.kind=gaussian",
        "attack.fraction=0.3",
    ],
    "fedper-topk": [
        "algorithm.name=fedper",
        "compression.kind=threshold",
        "compression.threshold=0.01",
        "aggregation.rule=median",
        "rounds=3",
    ],
}

BASE = [
    "name=fingerprint",
    "rounds=2",
    "data.name=mnist-5k",
    "data.num_clients=6",
    "data.partition.name=dirichlet",
    "data.partition.alpha=0.3",
    "client.lr=0.05",
    "join_ratio=0.7",
    "runtime.executor=local",
    "runtime.device=cpu",
]


def digest_state(value: Any, h: Any) -> None:
    """Feed every tensor / number in a nested state into ``h`` in a fixed order."""
    if isinstance(value, torch.Tensor):
        h.update(value.detach().cpu().contiguous().numpy().tobytes())
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            h.update(str(key).encode())
            digest_state(value[key], h)
    elif isinstance(value, (list, tuple)):
        for item in value:
            digest_state(item, h)
    elif isinstance(value, (int, float, str, bool)) or value is None:
        h.update(repr(value).encode())
    elif hasattr(value, "__array__"):
        import numpy as np

        h.update(np.asarray(value).tobytes())


def fingerprint(name: str, overrides: list[str]) -> str:
    cfg = load_config(None, BASE + overrides)
    with tempfile.TemporaryDirectory() as out:
        result = run_experiment(cfg, out, progress=False, report=False)
    history = [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in result.history]
    metrics = hashlib.sha256(json.dumps(history, sort_keys=True).encode()).hexdigest()[:16]
    state = hashlib.sha256()
    digest_state(result.state.get("params", result.state), state)
    return f"{name:<12} metrics={metrics} params={state.hexdigest()[:16]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"runs to fingerprint (default: {list(RUNS)})")
    args = parser.parse_args(argv)
    for name in args.names or list(RUNS):
        print(fingerprint(name, RUNS[name]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
