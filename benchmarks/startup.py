"""Start-up of a Ray run: seconds from the command to each step, from ``startup.json``.

Runs ``fedsim run`` (a fresh process each time, as a user would) on the overhead benchmark's
workload: FedAvgCNN on Fashion-MNIST, 100 clients (Dirichlet 0.5), every client evaluated
and trained in round 0, 2 worker actors. Each run writes ``startup.json`` (seconds since its
process started); this prints every pass and the median of each step.

Beside it, the same number for a plain two-process baseline: a driver process that starts one
worker process, which imports torch, reads the same first client's samples (its indices and
the Fashion-MNIST files, prepared before the clock starts) and trains it for one epoch with
the same FedAvgCNN, batch and learning rate, in plain PyTorch. And the floor
(``startup_floor.py``): the same local Ray and actors importing Lightning, nothing else. Last
line: ``RESULT first_client_s=<median> baseline_first_client_s=<median> ratio=<fedsim /
baseline> actors_ready_s=<median> first_round_s=<median> floor_actors_ready_s=<median>``.

    .venv/bin/python benchmarks/startup.py [--passes 3] [--clients 100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from startup_floor import floor

SETTLE_S = 5.0  # after a Ray run: its processes finish exiting before the next clock starts
QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"  # overridden
STEPS = (
    ("ray_start_began_s", "config read, Ray start begins"),
    ("driver_ready_s", "driver: torch imported, data, model, algorithm built"),
    ("ray_started_s", "Ray up"),
    ("actors_created_s", "worker actors created"),
    ("actors_ready_s", "workers imported torch and built their modules"),
    ("first_client_done_s", "first client trained"),
    ("first_round_done_s", "round 0 done (every client evaluated and trained)"),
)


def one_run(args: argparse.Namespace, out: Path) -> dict[str, float]:
    """One ``fedsim run`` in a new process; its startup.json plus the command's wall time."""
    command = [
        sys.executable, "-m", "fedsim.cli", "run", str(QUICKSTART), "--no-progress",
        "--out", str(out),
        "name=startup", "data.name=fashion-mnist", "data.download=false",
        f"data.num_clients={args.clients}", "data.partition.name=dirichlet",
        "data.partition.alpha=0.5", "rounds=1", "join_ratio=1.0", "client.batch_size=10",
        "client.lr=0.005", "runtime.executor=ray", f"runtime.workers={args.workers}",
    ]  # fmt: skip
    began = time.time()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    startup = json.loads((out / "startup.json").read_text())
    startup["command_s"] = time.time() - began
    return startup


BASELINE_WORKER = r"""
import sys, time, numpy as np
import torch
from torch import nn
torch.set_num_threads(1)
data = np.load(sys.argv[1])
x = torch.from_numpy((data["x"].astype(np.float32) / 255 - 0.5) / 0.5)[:, None]
y = torch.from_numpy(data["y"].astype(np.int64))
net = nn.Sequential(
    nn.Conv2d(1, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(),
    nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.005)
order = torch.randperm(len(y))
for start in range(0, len(y), 10):
    batch = order[start:start + 10]
    opt.zero_grad()
    nn.functional.cross_entropy(net(x[batch]), y[batch]).backward()
    opt.step()
print(time.time())
"""


def baseline_client(args: argparse.Namespace, scratch: Path) -> Path:
    """The first client's training samples as a .npz (not timed): what the baseline reads."""
    import numpy as np

    from fedsim.config import load_config
    from fedsim.simulation import build_data

    cfg = load_config(None, [
        "data.name=fashion-mnist", "data.download=false", f"data.num_clients={args.clients}",
        "data.partition.name=dirichlet", "data.partition.alpha=0.5",
    ])  # fmt: skip
    data = build_data(cfg)
    train = data.clients[0].train
    path = scratch / "client0.npz"
    np.savez(path, x=data.dataset.images[train][:, 0], y=data.dataset.labels[train])
    return path


def baseline_run(client: Path) -> float:
    """Seconds from a driver process's start (the command) to its worker process's first
    trained client."""
    driver = (
        "import subprocess, sys; "
        f"r = subprocess.run([sys.executable, '-c', {BASELINE_WORKER!r}, {str(client)!r}], "
        "check=True, capture_output=True, text=True); print(r.stdout.strip())"
    )
    began = time.time()
    done = subprocess.run(
        [sys.executable, "-c", driver], check=True, capture_output=True, text=True
    )
    return float(done.stdout.strip().splitlines()[-1]) - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    runs, baseline, floors = [], [], []
    with tempfile.TemporaryDirectory(prefix="fedsim-startup-") as scratch:
        client = baseline_client(args, Path(scratch))
        for attempt in range(args.passes):
            baseline.append(baseline_run(client))
            runs.append(one_run(args, Path(scratch) / f"run{attempt}"))
            time.sleep(SETTLE_S)
            floors.append(floor(args.workers))
            time.sleep(SETTLE_S)
            print(
                f"pass {attempt}: "
                + " ".join(f"{key[:-2]}={runs[-1].get(key, float('nan')):.2f}" for key, _ in STEPS)
                + f" (whole command {runs[-1]['command_s']:.1f} s; baseline first client "
                f"{baseline[-1]:.2f} s; floor: Ray up {floors[-1]['ray_up_s']:.2f}, actors "
                f"with Lightning ready {floors[-1]['actors_ready_s']:.2f} s)",
                flush=True,
            )
    median = {key: statistics.median(r[key] for r in runs if key in r) for key, _ in STEPS}
    print("\nmedian seconds since the command:")
    for key, meaning in STEPS:
        print(f"  {median[key]:6.2f}  {meaning}")
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    base = statistics.median(baseline)
    print(f"  {base:6.2f}  plain two-process baseline: first client trained")
    ready_floor = statistics.median(f["actors_ready_s"] for f in floors)
    print(f"  {ready_floor:6.2f}  floor: a bare local Ray's actors have imported Lightning")
    print(
        f"RESULT first_client_s={median['first_client_done_s']:.2f} "
        f"baseline_first_client_s={base:.2f} "
        f"ratio={median['first_client_done_s'] / base:.2f} "
        f"actors_ready_s={median['actors_ready_s']:.2f} "
        f"first_round_s={median['first_round_done_s']:.2f} "
        f"floor_actors_ready_s={ready_floor:.2f}"
    )


if __name__ == "__main__":
    main()
