"""How fast this machine is today, in the CPU-seconds of two fixed pieces of the suite's work.

The suite's figures (``make test``'s wall time and CPU-minutes) change with the machine as
much as with the tests: two clean-clone runs of the same commit have differed by a third. This
prints, before the suite runs, the CPU time of what nearly every test process and Ray worker
does first (import torch and Lightning, in a fresh process) and of what most tests then do
(100 SGD steps of a small CNN on 28x28 images, batch 10, one thread; the fastest of three
passes), each against the figure the two-core CI machine gave, quiet, on 2026-12-07, so a CI
log says whether a slower run is the machine or the suite: ``python .ci/machine_speed.py``.
One reading is a sample, not a constant: four identical imports back to back on the idle
machine took 7.9, 8.6, 10.1 and 9.6 CPU-seconds (no page faults from disk), so a ratio up to
about 1.4 is this machine's own variation.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time

REFERENCE = {"import": 7.0, "steps": 1.0}  # the fastest readings, quiet, 2026-12-07
STEPS = 100
WARM_UP = 20
PASSES = 3


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def import_cpu() -> float:
    """CPU seconds of a fresh process importing torch and pytorch_lightning, after one such
    import untimed: on a fresh install the first writes the bytecode (19.7 CPU-s in CI's
    clean clone against ~8), which every later process reads."""
    command = [sys.executable, "-c", "import torch, pytorch_lightning"]
    subprocess.run(command, check=True)
    before = children_cpu()
    subprocess.run(command, check=True)
    return children_cpu() - before


def steps_cpu() -> float:
    """CPU seconds of STEPS SGD steps of a two-conv CNN, batch 10, one torch thread: the
    fastest of three passes, after a warm-up (the first steps set up the conv kernels)."""
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10),
    )  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(10, 1, 28, 28), torch.randint(0, 10, (10,))

    def steps(count: int) -> float:
        began = time.process_time()
        for _ in range(count):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        return time.process_time() - began

    steps(WARM_UP)
    return min(steps(STEPS) for _ in range(PASSES))


def main() -> int:
    took = {"import": import_cpu(), "steps": steps_cpu()}
    parts = [
        f"import torch+Lightning {took['import']:.2f} CPU-s (ref {REFERENCE['import']:.2f})",
        f"{STEPS} CNN steps {took['steps']:.2f} CPU-s (ref {REFERENCE['steps']:.2f})",
    ]
    ratio = max(took[k] / REFERENCE[k] for k in took)
    print(f"machine speed: {'; '.join(parts)}; slowest ratio {ratio:.2f}x the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
