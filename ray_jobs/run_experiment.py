"""Run one experiment on an existing Ray cluster (RAY_ADDRESS), e.g. via ``ray job submit``.

ray job submit --working-dir . -- python -m ray_jobs.run_experiment CONFIG [key=value ...]
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
