"""Run a Ray Tune search (``fedsim tune``, fedsim/search/) as a cluster job.

    RAY_ADDRESS=http://HEAD:8265 ray job submit --working-dir . -- \\
        python -m ray_jobs.tune configs/tune/fedavg-lr.yaml --samples 32 --out /nfs/fedsim/tune-lr

It is ``fedsim tune`` joined to the job's cluster (``RAY_ADDRESS``, or ``--address``); on a
multi-node cluster ``--out`` and ``data.root`` must be paths every node shares. A job that
was stopped continues with ``python -m ray_jobs.tune --resume /nfs/fedsim/tune-lr``.
"""

from __future__ import annotations

import sys

from fedsim.cli import main


def run(argv: list[str]) -> int:
    """``fedsim tune`` with the job's arguments."""
    return main(["tune", *argv])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
