"""Two tiny finished run folders shared by the tracking tests (one W&B-offline, one not).

Built once per test session (~10-20 s on this machine): FedAvg with W&B in offline mode and
cwFedAvg (which has its own figure, the row-norm heatmap), both on 1,200 digits of mnist-5k,
6 Dirichlet clients, 2 rounds.
"""

from __future__ import annotations

import os
from pathlib import Path

from fedsim.config import load_config
from fedsim.experiment import run_experiment

TINY = [
    "rounds=2",
    "data.num_clients=6",
    "data.max_samples=1200",
    "join_ratio=0.5",
    "data.partition.name=dirichlet",
    "data.partition.alpha=0.5",
    "runtime.executor=local",
]
MAX_CLIENT_SERIES = 3
GROUP = "tiny-group"
_RUNS: dict[str, Path] = {}


def tiny_runs(root: Path) -> dict[str, Path]:
    """``{"fedavg": run folder with wandb/, "cwfedavg": run folder}``; made on first call."""
    if _RUNS:
        return _RUNS
    previous = os.environ.get("WANDB_MODE")
    os.environ["WANDB_MODE"] = "offline"
    try:
        wandb = [
            "tracking.wandb.enabled=true",
            "tracking.wandb.mode=online",  # no key/network here: must fall back to offline
            f"tracking.wandb.max_client_series={MAX_CLIENT_SERIES}",
            "tracking.wandb.tags=[test]",
            f"tracking.wandb.group={GROUP}",
            "tracking.wandb.params={arm: baseline, client_lr: 0.05}",
        ]
        cfg = load_config("configs/quickstart.yaml", [*TINY, "name=tiny-fedavg", *wandb])
        run_experiment(cfg, root / "tiny-fedavg", progress=False)
        cfg = load_config(
            "configs/quickstart.yaml", [*TINY, "name=tiny-cwfedavg", "algorithm.name=cwfedavg"]
        )
        run_experiment(cfg, root / "tiny-cwfedavg", progress=False)
    finally:
        if previous is None:
            os.environ.pop("WANDB_MODE", None)
        else:
            os.environ["WANDB_MODE"] = previous
    _RUNS.update(fedavg=root / "tiny-fedavg", cwfedavg=root / "tiny-cwfedavg")
    return _RUNS
