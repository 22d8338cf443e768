"""Run one experiment on an existing Ray cluster (RAY_ADDRESS), e.g. via ``ray job submit``.

    # the job server is the head's dashboard (port 8265); the driver then joins the cluster
    RAY_ADDRESS=http://HEAD:8265 ray job submit --working-dir . -- \
        python -m ray_jobs.run_experiment configs/quickstart.yaml rounds=100 runtime.workers=8

    # or as a plain driver on a cluster node (RAY_ADDRESS=HEAD:6379 or auto)
    python -m ray_jobs.run_experiment CONFIG [key=value ...] [--out DIR]

It is ``fedsim run`` with ``runtime.executor=ray runtime.address=auto`` (overrides given after
CONFIG win). The run folder is written where the driver runs (``runs/<name>``, or ``--out``).
Related jobs: ``ray_jobs.tune`` (Ray Tune searches) and ``ray_jobs.reproduce`` (configs x
seeds, mean +- std tables).
"""

from __future__ import annotations

import sys

from fedsim.cli import main


def run(argv: list[str]) -> int:
    """``fedsim run`` with the Ray executor attached to the job's cluster."""
    if not argv or argv[0].startswith("-"):
        print("usage: python -m ray_jobs.run_experiment CONFIG [key=value ...] [--out DIR]")
        return 2
    return main(["run", argv[0], "runtime.executor=ray", "runtime.address=auto", *argv[1:]])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
