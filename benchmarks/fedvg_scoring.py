"""FedVG's validation scoring as a share of the round, with 100 clients.

FedVG scores every uploaded model with a forward/backward pass over the whole server
validation set, on the worker that trained it, right after training. Per client that costs
|val| samples against n_i x epochs samples of training, so with the default validation set
(10% of every client: 10% of all training data) and N clients the ratio grows like
0.1 N / epochs: the algorithm's own cost, not the simulator's. This measures it.

Setting: FedAvgCNN on Fashion-MNIST, 100 clients, Dirichlet(0.1), join ratio 0.1 (the
seed's setting), batch 10, lr 0.005 (PFLlib), local executor in this process (``--threads``
torch threads), each run through ``run_experiment`` into a temporary folder. For each
variant it runs ``--rounds`` training rounds of FedVG and, as the reference measured in the
same run, the same rounds with ``weighting=samples`` (plain FedAvg). Timed: the wall
seconds of rounds 1.. (round 0 also evaluates every client; no other round evaluates) and
the seconds spent inside ``validation_gradient`` in them.

Variants: the default validation set (``full``); capped at 500 samples (``val_samples=500``,
the size of the official code's validation subset); validation batches of 256 instead of 32
(same weights for a model without BatchNorm or dropout, fewer, larger passes); 5 local epochs
(the seed's setting). Last line:
``RESULT fedvg_scoring_share=<default share> capped_500=<share> ...``.

    .venv/bin/python benchmarks/fedvg_scoring.py [--rounds 3] [--clients 100] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

import fedsim.algorithms.fedvg as weighting
from fedsim.config import load_config
from fedsim.experiment import run_experiment

VARIANTS = {
    "full": [],
    "capped_500": ["algorithm.val_samples=500"],
    "batch_256": ["algorithm.score_batch_size=256"],
    "epochs_5": ["client.epochs=5"],
}


class ScoringClock:
    """Wraps ``validation_gradient`` to add up the seconds spent in it, per round."""

    def __init__(self) -> None:
        self.seconds: dict[int, float] = {}
        self.calls = 0
        self.original = weighting.validation_gradient

    def __call__(self, probe, *args, **kwargs):
        began = time.perf_counter()
        try:
            return self.original(probe, *args, **kwargs)
        finally:
            spent = time.perf_counter() - began
            self.seconds[probe.round_idx] = self.seconds.get(probe.round_idx, 0.0) + spent
            self.calls += 1


def run(args: argparse.Namespace, overrides: list[str]) -> tuple[list[float], float, int]:
    """Seconds of rounds 1.. (training only), scoring seconds in them, models scored."""
    cfg = load_config(
        None,
        [
            "data.name=fashion-mnist",
            "data.download=false",
            f"data.num_clients={args.clients}",
            "data.partition.name=dirichlet",
            "data.partition.alpha=0.1",
            f"rounds={args.rounds}",
            f"join_ratio={args.join_ratio}",
            "eval_every=1000",
            "client.lr=0.005",
            "client.batch_size=10",
            "runtime.executor=local",  # in this process: the clock sees every scoring call
            "runtime.device=cpu",
            f"runtime.cpus_per_worker={args.threads}",
            *overrides,
        ],
    )
    clock = ScoringClock()
    weighting.validation_gradient = clock
    try:
        with tempfile.TemporaryDirectory() as run_dir:
            result = run_experiment(cfg, run_dir, progress=False, report=False)
    finally:
        weighting.validation_gradient = clock.original
    timed = range(1, args.rounds)  # round 0 also evaluates every client: left out
    rounds = [result.history[r]["seconds"] for r in timed]
    return rounds, sum(clock.seconds.get(r, 0.0) for r in timed), clock.calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds 1.. are timed")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--join-ratio", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="only full and capped_500")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"fashion-mnist, {args.clients} clients Dir(0.1), join ratio {args.join_ratio}, "
        f"{args.rounds} training rounds, {args.threads} torch thread(s)"
    )
    shares: dict[str, float] = {}
    names = ["full", "capped_500"] if args.quick else list(VARIANTS)
    for name in names:
        extra = VARIANTS[name]
        vg_rounds, scoring, scored = run(args, ["algorithm.name=fedvg", *extra])
        ref_rounds, _, _ = run(
            args, ["algorithm.name=fedvg", "algorithm.weighting=samples", *extra]
        )
        vg, ref = statistics.mean(vg_rounds), statistics.mean(ref_rounds)
        share = scoring / sum(vg_rounds)
        timed = len(vg_rounds)
        shares[name] = share
        print(
            f"{name:>11}: FedVG round {vg:6.2f} s, of which scoring {scoring / timed:6.2f} s "
            f"({share:5.1%}; {scored} models scored in {args.rounds} rounds); "
            f"FedAvg round {ref:6.2f} s; FedVG / FedAvg = {vg / ref:4.2f}"
        )
    print(
        "RESULT fedvg_scoring_share="
        + f"{shares['full']:.3f} "
        + " ".join(f"{k}={v:.3f}" for k, v in shares.items() if k != "full")
    )


if __name__ == "__main__":
    main()
