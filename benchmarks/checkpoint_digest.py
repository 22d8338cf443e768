"""What checkpoint integrity costs: fedsim's save (write, SHA-256 while writing, verify by
loading back) and load (digest check, allowlisted unpickling) against a plain torch.save /
torch.load of the same payload, measured in the same run.

    python benchmarks/checkpoint_digest.py            # a FedAvgCNN checkpoint (2.3 MB) and
                                                      # 100 clients' states (~230 MB)
Prints one RESULT line per size: the share of the load time that is the digest check.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path

import torch

from fedsim.checkpoint import Checkpoint, load_checkpoint, save_checkpoint

PARAMS = 582_026  # FedAvgCNN on 28x28 images


def payload(clients: int) -> Checkpoint:
    state = {"params": torch.randn(PARAMS)}
    states = {c: {"control": torch.randn(PARAMS)} for c in range(clients)}
    return Checkpoint(2, {"rounds": 3}, state, states, [])


def best(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


def measure(clients: int, folder: str) -> None:
    checkpoint = payload(clients)
    path = save_checkpoint(folder, checkpoint)
    size = path.stat().st_size / 2**20
    plain = Path(folder) / "plain.pt"
    save = best(lambda: save_checkpoint(folder, checkpoint))
    torch_save = best(lambda: torch.save(checkpoint.__dict__, plain))
    load = best(lambda: load_checkpoint(path))
    torch_load = best(lambda: torch.load(plain, weights_only=False))
    digest = best(lambda: hashlib.sha256(path.read_bytes()).hexdigest())
    print(f"{size:7.1f} MB  save {save * 1e3:7.1f} ms (torch.save {torch_save * 1e3:7.1f})"
          f"  load {load * 1e3:7.1f} ms (torch.load {torch_load * 1e3:7.1f})"
          f"  read + SHA-256 {digest * 1e3:6.1f} ms")  # fmt: skip
    print(f"RESULT size_mb={size:.1f} digest_share_of_load={digest / load:.3f} "
          f"save_vs_torch_save={save / torch_save:.2f}")  # fmt: skip


def main() -> None:
    torch.manual_seed(0)
    for clients in (0, 100):
        with tempfile.TemporaryDirectory() as folder:
            measure(clients, folder)


if __name__ == "__main__":
    main()
