"""Start-up of a Ray run: seconds from the command to each step, from ``startup.json``.

Runs ``fedsim run`` (a fresh process each time, as a user would) on the overhead benchmark's
workload: FedAvgCNN on Fashion-MNIST, 100 clients (Dirichlet 0.5), every client evaluated
and trained in round 0, 2 worker actors. Each run writes ``startup.json`` (seconds since its
process started); this prints every pass and the median of each step. Last line:
``RESULT first_client_s=<median> actors_ready_s=<median> first_round_s=<median>``.

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="fedsim-startup-") as scratch:
        for attempt in range(args.passes):
            runs.append(one_run(args, Path(scratch) / f"run{attempt}"))
            print(
                f"pass {attempt}: "
                + " ".join(f"{key[:-2]}={runs[-1].get(key, float('nan')):.2f}" for key, _ in STEPS)
                + f" (whole command {runs[-1]['command_s']:.1f} s)",
                flush=True,
            )
    median = {key: statistics.median(r[key] for r in runs if key in r) for key, _ in STEPS}
    print("\nmedian seconds since the command:")
    for key, meaning in STEPS:
        print(f"  {median[key]:6.2f}  {meaning}")
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(
        f"RESULT first_client_s={median['first_client_done_s']:.2f} "
        f"actors_ready_s={median['actors_ready_s']:.2f} "
        f"first_round_s={median['first_round_done_s']:.2f}"
    )


if __name__ == "__main__":
    main()
