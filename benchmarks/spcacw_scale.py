"""SP-CACW's sensitivity to input scale and learning rate: L, L eta, and what they do to alpha.

    python benchmarks/spcacw_scale.py           # the table in benchmarks/results/spcacw.md
    python benchmarks/spcacw_scale.py --lrs 0.05 --normalize standard pfllib

The independent check's setting (``configs/spcacw/mnist5k-relabel-mlp.yaml``: mnist-5k
relabel, 20 clients in 4 clusters, MLP 784-200-200-10, batch 10) made cheaper as in the
issue's own analysis: one target per cluster (0-3), 8 rounds, seed 0; SP-CACW's defaults
(beta 1/t, T_start 1, quadratic bias, raw variance, L by HVPs, ``L_history=current``). For
each pixel scaling (``data.normalize``) and learning rate it prints, at the last round, mean
over the targets: the estimated L, L eta, the variance term over the bias term (``alpha^T
L V alpha`` / ``alpha^T A alpha`` per step, as logged), the own-cluster weight, other-cluster
peers at exactly 0 (of 15), the targets' accuracy, and Local-only's on the same targets.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fedsim.config import load_config  # noqa: E402
from fedsim.runtime.executor import LocalExecutor  # noqa: E402
from fedsim.simulation import Simulation  # noqa: E402
from fedsim.tracking.base import MemorySink  # noqa: E402

TARGETS = (0, 1, 2, 3)
CONFIGS = {
    "spcacw": ROOT / "configs" / "spcacw" / "mnist5k-relabel-mlp.yaml",
    "local": ROOT / "configs" / "settings" / "mnist5k-relabel-mlp-local.yaml",
}


def run(algorithm: str, overrides: list[str]) -> tuple[float, dict, dict]:
    """(targets' mean accuracy at the last round, last training round's record, final state)."""
    torch.set_num_threads(1)
    extra = [f"algorithm.targets=[{','.join(map(str, TARGETS))}]"] if algorithm == "spcacw" else []
    cfg = load_config(CONFIGS[algorithm], [*extra, *overrides])
    simulation = Simulation(cfg)
    simulation.worker_spec.num_threads = 1
    sink = MemorySink()
    with LocalExecutor(simulation.worker_spec, simulation.data) as executor:
        result = simulation.run(executor, [sink])
    last = [r for r in sink.records if r.clients][-1]
    accuracy = {c.client: c.accuracy for c in last.clients}
    trained = [h for h in result.history if "variance_term" in h] or [{}]  # Local: none
    return float(np.mean([accuracy[t] for t in TARGETS])), trained[-1], result.state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--normalize", nargs="*", default=["pfllib", "standard", "none"])
    parser.add_argument("--lrs", nargs="*", type=float, default=[0.02, 0.05, 0.1])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "extra", nargs="*", help="more overrides, e.g. algorithm.L_history=per_step"
    )
    args = parser.parse_args(argv)
    print(
        "| pixels | lr | L | L eta | variance / bias term | own-cluster alpha "
        "| other-cluster peers at 0 (of 15) | accuracy | Local-only |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    clusters = np.arange(20) % 4
    for normalize in args.normalize:
        for lr in args.lrs:
            common = [
                f"seed={args.seed}",
                f"rounds={args.rounds}",
                f"data.normalize={normalize}",
                f"client.lr={lr}",
                "checkpoint_every=0",
                *args.extra,
            ]
            accuracy, record, state = run("spcacw", common)
            local, _, _ = run("local", common)
            alpha = state["alpha"]
            own = np.mean([alpha[k][clusters == clusters[t]].sum() for k, t in enumerate(TARGETS)])
            zeros = np.mean(
                [(alpha[k][clusters != clusters[t]] == 0).sum() for k, t in enumerate(TARGETS)]
            )
            lipschitz = float(np.mean(state["lipschitz"]))
            ratio = record["variance_term"] / record["bias_term"]
            print(
                f"| {normalize} | {lr} | {lipschitz:.1f} | {lipschitz * lr:.2f} | {ratio:.1f} "
                f"| {own:.2f} | {zeros:.1f} | {100 * accuracy:.1f} | {100 * local:.1f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
