"""Clean vs attacked accuracy for each aggregation rule and attack (mnist-5k, CPU-sized).

Every run: FedAvg on ``--samples`` mnist-5k digits split IID over ``--clients`` clients, all
of them every round, ``--rounds`` rounds, one local epoch (lr 0.05, batch 10), the local
executor; attackers are ``attack.fraction`` = 0.2 of the clients from round 0 with the
default ``attack.factor`` (4). Prints a Markdown table of final weighted accuracy (rows:
rules; columns: no attack, then each attack) and, per attack, the anomaly filter's recall;
``--costs`` instead: accuracy, bytes_up and epsilon of clean runs with privacy or compression.

    python benchmarks/robustness.py --out benchmarks/results/robustness.md
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from fedsim.config import load_config
from fedsim.deployment.attacks import attackers
from fedsim.errors import ClientFailureError
from fedsim.runtime.executor import LocalExecutor
from fedsim.simulation import Simulation

RULES: dict[str, list[str]] = {
    "mean": [],
    "median": ["aggregation.rule=median"],
    "trimmed_mean (0.2)": ["aggregation.rule=trimmed_mean", "aggregation.trim=0.2"],
    "krum (f=2)": ["aggregation.rule=krum", "aggregation.krum_f=2"],
    "multikrum (f=2)": ["aggregation.rule=multikrum", "aggregation.krum_f=2"],
    "bulyan (f=1)": ["aggregation.rule=bulyan", "aggregation.krum_f=1"],
    "mean + anomaly filter 0.5": ["aggregation.anomaly_cosine=0.5"],
}
ATTACKS = ["none", "sign_flip", "scale", "gaussian", "label_flip"]
# --costs: what privacy and compression cost a clean FedAvg run (uniform weights for DP)
DP = ["algorithm.weighting=uniform", "privacy.clip_norm=1.0"]
COSTS: dict[str, list[str]] = {
    "none": [],
    "central DP, z=0.1": [*DP, "privacy.mode=central", "privacy.noise_multiplier=0.1"],
    "central DP, z=0.3": [*DP, "privacy.mode=central", "privacy.noise_multiplier=0.3"],
    "central DP, z=1": [*DP, "privacy.mode=central", "privacy.noise_multiplier=1.0"],
    "local DP, z=0.01": [*DP, "privacy.mode=local", "privacy.noise_multiplier=0.01"],
    "local DP, z=0.03": [*DP, "privacy.mode=local", "privacy.noise_multiplier=0.03"],
    "local DP, z=0.1": [*DP, "privacy.mode=local", "privacy.noise_multiplier=0.1"],
    "fixed_sigma 0.01 (the seed)": ["privacy.mode=fixed_sigma", "privacy.sigma=0.01"],
    "top-k 10%": ["compression.kind=topk", "compression.fraction=0.1"],
    "top-k 1%": ["compression.kind=topk", "compression.fraction=0.01"],
    "top-k 1% + error feedback": [
        "compression.kind=topk", "compression.fraction=0.01", "compression.error_feedback=true"
    ],
    "threshold 0.001": ["compression.kind=threshold", "compression.threshold=0.001"],
    "threshold 0.01": ["compression.kind=threshold", "compression.threshold=0.01"],
}  # fmt: skip


def run(base: list[str], extra: list[str]) -> tuple[float, float | None]:
    """(final weighted accuracy, anomaly-filter recall of the attackers or None)."""
    cfg = load_config(None, base + extra)
    sim = Simulation(cfg)
    result = sim.run(LocalExecutor(sim.worker_spec, sim.data))
    bad = set(attackers(cfg.attack, cfg.data.num_clients, cfg.seed))
    dropped = [set(h["anomaly_dropped"]) for h in result.history if "anomaly_dropped" in h]
    recall = None
    if dropped and bad:
        recall = sum(len(bad & d) for d in dropped) / (len(bad) * len(dropped))
    return result.summary["final"]["acc_weighted"], recall


def costs(base: list[str]) -> list[str]:
    """Markdown rows: accuracy, bytes_up over the run and epsilon, per option set."""
    lines = ["| options | accuracy | bytes_up (MB) | epsilon (delta 1e-5) |", "|---|---|---|---|"]
    for name, extra in COSTS.items():
        cfg = load_config(None, base + extra)
        sim = Simulation(cfg)
        try:
            result = sim.run(LocalExecutor(sim.worker_spec, sim.data))
        except ClientFailureError:
            lines.append(f"| {name} | diverged (non-finite losses) | - | - |")
            print(lines[-1], flush=True)
            continue
        up = sum(h.get("bytes_up", 0) for h in result.history) / 1e6
        eps = (result.summary.get("privacy") or {}).get("epsilon")
        eps_text = "-" if eps is None else f"{eps:.3g}"
        accuracy = result.summary["final"]["acc_weighted"]
        lines.append(f"| {name} | {accuracy:.3f} | {up:.2f} | {eps_text} |")
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1200)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rules", nargs="*", default=list(RULES), choices=list(RULES))
    parser.add_argument("--attacks", nargs="*", default=ATTACKS, choices=ATTACKS)
    parser.add_argument("--out", default=None, help="also write the table to this file")
    parser.add_argument("--costs", action="store_true", help="privacy / compression table")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # as in a worker: more threads on a busy CPU only spin
    base = [
        f"seed={args.seed}",
        f"rounds={args.rounds}",
        f"eval_every={args.rounds}",
        "data.name=mnist-5k",
        f"data.max_samples={args.samples}",
        f"data.num_clients={args.clients}",
        "data.partition.name=iid",
        "client.lr=0.05",
        "runtime.executor=local",
        "runtime.device=cpu",
    ]
    if args.costs:
        costs(base)
        return 0
    lines = [
        f"mnist-5k, {args.samples} digits IID over {args.clients} clients (all every round), "
        f"{args.rounds} rounds of FedAvg, seed {args.seed}; 20% attackers from round 0, "
        "attack.factor 4. Final weighted test accuracy; the filter's recall in brackets.",
        "",
        "| rule | " + " | ".join(args.attacks) + " |",
        "|---|" + "---|" * len(args.attacks),
    ]
    print("\n".join(lines), flush=True)
    began = time.perf_counter()
    for rule in args.rules:
        cells = []
        for attack in args.attacks:
            extra = list(RULES[rule])
            if attack != "none":
                extra += [f"attack.kind={attack}", "attack.fraction=0.2"]
            accuracy, recall = run(base, extra)
            cell = f"{accuracy:.3f}"
            if recall is not None:
                cell += f" ({recall:.2f})"
            cells.append(cell)
        lines.append(f"| {rule} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
        if args.out:
            with open(args.out, "w") as handle:
                handle.write("# Robustness: clean vs attacked accuracy\n\n" + "\n".join(lines))
                handle.write(f"\n\n({time.perf_counter() - began:.0f} s on this machine)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
