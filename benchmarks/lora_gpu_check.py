"""LoRA on SmolLM2-135M on a GPU: float32, a bfloat16 base with bf16 autocast, and gradient
checkpointing, each against the float32 run (``benchmarks/gpu_check.py --lora`` runs it).

The shipped ``configs/lora/shakespeare-smollm2-fedavg.yaml``, shrunk to ``--clients`` roles of
``--windows`` windows and ``--rounds`` rounds, on ``runtime.device=cuda``, local executor.
Gradient checkpointing must give the float32 run's loss to float noise; bfloat16 within
``--tolerance`` (relative). Prints seconds per round and the GPU's peak memory of each.

    python benchmarks/lora_gpu_check.py [--clients 4] [--windows 16] [--rounds 2]
        [--tolerance 0.02]

Last line: ``RESULT lora_gpu_ok=<ways ok>/3 ...``; exit status 1 when a way fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WAYS = {
    "float32": [],
    "bf16": ["model.args.dtype=bfloat16", "client.precision=bf16-mixed"],
    "checkpointing": ["model.args.gradient_checkpointing=true"],
}


def run_way(way: str, args: argparse.Namespace) -> tuple[float, float, float]:
    """(final loss, seconds per round, peak GPU memory in GB) of one way."""
    import torch

    from fedsim.config import load_config
    from fedsim.experiment import run_experiment

    cfg = load_config(str(ROOT / "configs/lora/shakespeare-smollm2-fedavg.yaml"), [
        "runtime.executor=local", "runtime.device=cuda", f"rounds={args.rounds}",
        f"data.num_clients={args.clients}", f"data.max_client_samples={args.windows}",
        f"data.min_samples={args.windows}", *WAYS[way],
    ])  # fmt: skip
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        result = run_experiment(cfg, Path(out) / way, progress=False, report=False)
    seconds = (time.perf_counter() - start) / args.rounds
    return float(result.history[-1]["loss"]), seconds, torch.cuda.max_memory_allocated() / 1e9


def check(args: argparse.Namespace) -> bool:
    """Run every way; print one line each and the RESULT line; whether all passed."""
    results: dict[str, tuple[float, float, float] | None] = {}
    for way in WAYS:
        try:
            results[way] = run_way(way, args)
        except Exception:  # report every way, then fail
            print(f"lora {way}: FAILED\n{traceback.format_exc()}", flush=True)
            results[way] = None
    reference = results["float32"]
    ok = 0
    for way, got in results.items():
        if got is None or reference is None:
            continue
        gap = abs(got[0] - reference[0]) / reference[0]
        limit = 1e-4 if way != "bf16" else args.tolerance
        ok += gap <= limit
        print(f"lora {way}: loss {got[0]:.4f} (relative gap {gap:.2e}, limit {limit:g}), "
              f"{got[1]:.2f} s/round, peak {got[2]:.2f} GB", flush=True)  # fmt: skip
    print(f"RESULT lora_gpu_ok={ok}/{len(WAYS)}")
    return ok == len(WAYS)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=0.02)
    return parser.parse_args(argv)


def main() -> None:
    import torch

    args = parse()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible: run this on a GPU machine")
    sys.exit(0 if check(args) else 1)


if __name__ == "__main__":
    main()
