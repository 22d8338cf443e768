"""How fast this machine is today, in the CPU-seconds of two fixed pieces of the suite's work.

The suite's figures (``make test``'s wall time and CPU-minutes) change with the machine as
much as with the tests: two clean-clone runs of the same commit have differed by a third. This
prints, before the suite runs, the CPU time of what nearly every test process and Ray worker
does first (import torch and Lightning, in a fresh process) and of what most tests then do
(SGD steps of a small CNN on 28x28 images, batch 10, one thread), with the figures this
machine gave when the suite's targets were set, so a CI log says whether a slower run is the
machine or the suite: ``python .ci/machine_speed.py``.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time

REFERENCE = {"import": 6.9, "steps": 1.0}  # quiet two-core machine, 2026-12-07 (see docstring)
STEPS = 300


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def import_cpu() -> float:
    """CPU seconds of a fresh process importing torch and pytorch_lightning."""
    before = children_cpu()
    subprocess.run([sys.executable, "-c", "import torch, pytorch_lightning"], check=True)
    return children_cpu() - before


def steps_cpu() -> float:
    """CPU seconds of STEPS SGD steps of a two-conv CNN, batch 10, one torch thread."""
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
    began = time.process_time()
    for _ in range(STEPS):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return time.process_time() - began


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
