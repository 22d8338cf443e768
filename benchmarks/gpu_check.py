"""Every algorithm on ``runtime.device=cuda`` against the same run on the CPU (a GPU machine).

For each registered algorithm: its Fashion-MNIST config from ``configs/`` (FedAvg-family
members without one borrow the FedVG config with their name), shrunk to a stratified
``--samples`` subset (``data.max_samples``), ``--clients`` clients and ``--rounds`` rounds,
run by the local executor once with ``runtime.device=cpu`` and once with ``cuda``. The two
should agree to within float noise (GPU kernels round differently, so not bit for bit);
per-round times are printed.
Then ``runtime.device=cuda:<count>`` must fail with a one-line ConfigError. With ``--ray``:
FedAvg and FedVG on a Ray pool of ``--workers-per-gpu`` workers sharing each GPU (fractional
GPUs): every worker must report CUDA and its memory cap (1 / workers_per_gpu), and the run
must match the local CUDA run.

    python benchmarks/gpu_check.py --data-root data --samples 3000 --rounds 2 [--ray] [--lora]

``--lora``: also LoRA on SmolLM2-135M in float32, with a bfloat16 base and bf16 autocast, and
with gradient checkpointing (``benchmarks/lora_gpu_check.py``, its defaults).

Last line: ``RESULT gpu_ok=<algorithms ok>/<algorithms> max_acc_gap=<points>``; exit status 1
when any algorithm fails or differs by more than ``--tolerance`` points.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIG_OF = {
    "cwfedavg": "configs/cwfedavg/fmnist-dir-cw-output-wdr.yaml",
    "fedper": "configs/fedper/fmnist-dir-fedper.yaml",
    "ditto": "configs/personalization/fmnist-dir-ditto.yaml",
    "fedamp": "configs/personalization/fmnist-dir-fedamp.yaml",
    "fedfomo": "configs/personalization/fmnist-dir-fedfomo.yaml",
    "local": "configs/personalization/fmnist-dir-local.yaml",
    "fedavg": "configs/fedvg/fmnist-dir-fedavg.yaml",
    "fedprox": "configs/fedvg/fmnist-dir-fedprox.yaml",
    "fedvg": "configs/fedvg/fmnist-dir-fedvg.yaml",
}


def run(
    algorithm: str, device: str, args: argparse.Namespace, executor: str = "local"
) -> tuple[float, float]:
    """(sample-weighted accuracy of the last round, seconds per round) of one small run.

    Built by hand (not ``run_experiment``) on purpose: it checks every Ray worker's device
    and CUDA memory cap on the executor before the run.
    """
    from fedsim.config import load_config
    from fedsim.runtime.factory import make_executor
    from fedsim.simulation import Simulation

    path = CONFIG_OF.get(algorithm, CONFIG_OF["fedvg"])
    overrides = [
        f"rounds={args.rounds}",
        f"data.num_clients={args.clients}",
        f"data.root={args.data_root}",
        "data.download=false",
        f"data.max_samples={args.samples}",
        f"runtime.executor={executor}",
        f"runtime.device={device}",
        f"runtime.workers_per_gpu={args.workers_per_gpu}",
    ]
    if algorithm not in CONFIG_OF:
        overrides += [f"algorithm.name={algorithm}", "algorithm.weighting=fedvg"]
    cfg = load_config(ROOT / path, overrides)
    sim = Simulation(cfg)
    began = time.perf_counter()
    with make_executor(cfg.runtime, sim.worker_spec, sim.data) as pool:
        for info in getattr(pool, "worker_info", []):
            print(f"    ray worker {info}", flush=True)
            expected = 1 / args.workers_per_gpu
            on_share = info["device"] == "cuda" and info["cuda_memory_fraction"] == expected
            if device != "cpu" and not on_share:
                raise RuntimeError(f"worker not on its GPU share {expected}: {info}")
        result = sim.run(pool)
    seconds = (time.perf_counter() - began) / args.rounds
    return result.history[-1]["acc_weighted"], seconds


def compare(
    algorithm: str, device_a: str, executor_a: str, device_b: str, executor_b: str, args: Any
) -> float | None:
    """Run ``algorithm`` both ways; print and return the accuracy gap (None: it failed)."""
    label = f"{algorithm} {device_a}/{executor_a} vs {device_b}/{executor_b}"
    try:
        acc_a, s_a = run(algorithm, device_a, args, executor_a)
        acc_b, s_b = run(algorithm, device_b, args, executor_b)
    except Exception:  # report every pair, then fail
        print(f"{label}: FAILED\n{traceback.format_exc()}", flush=True)
        return None
    gap = 100 * abs(acc_b - acc_a)
    print(
        f"{label}: acc {100 * acc_a:6.2f} vs {100 * acc_b:6.2f} (gap {gap:.2f}), "
        f"s/round {s_a:.2f} vs {s_b:.2f}",
        flush=True,
    )
    return gap


def main() -> None:
    import torch

    from fedsim.algorithms.registry import ALGORITHMS
    from fedsim.config import load_config
    from fedsim.errors import ConfigError
    from fedsim.runtime.factory import local_device

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=3.0, help="accuracy points")
    parser.add_argument("--ray", action="store_true", help="also a Ray pool on fractional GPUs")
    parser.add_argument("--workers-per-gpu", type=int, default=4)
    parser.add_argument("--only", default=None, help="comma-separated algorithms")
    parser.add_argument("--lora", action="store_true", help="also benchmarks/lora_gpu_check.py")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible: run this on a GPU machine")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    torch.set_num_threads(1)
    algorithms = args.only.split(",") if args.only else sorted(ALGORITHMS)
    pairs = [(a, "cpu", "local", "cuda", "local") for a in algorithms]
    if args.ray:  # the Ray pool on fractional GPUs against the local CUDA run
        pairs += [(a, "cuda", "local", "cuda", "ray") for a in ("fedavg", "fedvg")]
    gaps = [compare(*pair, args) for pair in pairs]
    ok = sum(g is not None and g <= args.tolerance for g in gaps)
    missing = f"cuda:{torch.cuda.device_count()}"
    try:
        local_device(load_config(None, [f"runtime.device={missing}"]).runtime.device)
        print(f"runtime.device={missing}: accepted (WRONG)")
        rejected = False
    except ConfigError as error:
        print(f"runtime.device={missing}: ConfigError: {error}")
        rejected = True
    worst = max((g for g in gaps if g is not None), default=0.0)
    print(f"RESULT gpu_ok={ok}/{len(pairs)} max_acc_gap={worst:.2f} bad_device_rejected={rejected}")
    lora_ok = True
    if args.lora:
        import lora_gpu_check

        lora_ok = lora_gpu_check.check(lora_gpu_check.parse([]))
    sys.exit(0 if ok == len(pairs) and rejected and lora_ok else 1)


if __name__ == "__main__":
    main()
