"""The floor under a Ray run's start on this machine: the same local Ray and worker actors
that ``fedsim run`` starts, with nothing else to do.

One process imports Ray, starts a private local Ray (no dashboard, like fedsim's), creates
``--workers`` actors that each import ``pytorch_lightning`` (what every fedsim worker must,
its models being LightningModules) and waits for them. No config check, no data, no driver
imports, no training: whatever ``fedsim run`` does on top, its first client cannot train
before this. Prints ``FLOOR ray_up_s=<s> actors_ready_s=<s> actor_import_s=<slowest>``, in
seconds since the command.

    .venv/bin/python benchmarks/startup_floor.py [--workers 2] [--module pytorch_lightning]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from fedsim.runtime.ray_cluster import PRIVATE_RAY_ENVIRONMENT

PROBE = r"""
import importlib, sys, time
began = float(sys.argv[1])
import ray
ray.init(num_cpus=int(sys.argv[2]), include_dashboard=False, logging_level="WARNING")
up = time.time() - began

@ray.remote(num_cpus=1)
class Worker:
    def __init__(self, module):
        start = time.time()
        if module:
            importlib.import_module(module)
        self.import_s = time.time() - start

    def ready(self):
        return self.import_s

actors = [Worker.remote(sys.argv[4]) for _ in range(int(sys.argv[3]))]
imports = ray.get([a.ready.remote() for a in actors])
print(f"FLOOR ray_up_s={up:.2f} actors_ready_s={time.time() - began:.2f} "
      f"actor_import_s={max(imports):.2f}")
ray.shutdown()
"""


def floor(workers: int, module: str = "pytorch_lightning") -> dict[str, float]:
    """One measurement in a fresh process: {ray_up_s, actors_ready_s, actor_import_s}."""
    env = {**PRIVATE_RAY_ENVIRONMENT, **os.environ}  # the settings of fedsim's own Ray
    began = time.time()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(began), str(os.cpu_count() or 1), str(workers), module],
        check=True, capture_output=True, text=True, env=env,
    )  # fmt: skip
    line = next(x for x in done.stdout.splitlines() if x.startswith("FLOOR "))
    return {k: float(v) for k, v in (item.split("=") for item in line.split()[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--module", default="pytorch_lightning", help="'' imports nothing")
    args = parser.parse_args()
    print("FLOOR " + " ".join(f"{k}={v:.2f}" for k, v in floor(args.workers, args.module).items()))


if __name__ == "__main__":
    main()
