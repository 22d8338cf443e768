"""LoRA on a pretrained LM: a fedsim round against a plain peft loop, and a worker's memory.

Two measurements on ``configs/lora/shakespeare-smollm2-fedavg.yaml`` (SmolLM2-135M, LoRA r=8
on q_proj and v_proj, Shakespeare's roles), local executor, one process:

``round``: N clients each evaluate the global adapter on their test windows and train one
epoch; the server averages. (a) fedsim's round, then (b) a plain loop that does the same work
by hand with ``peft`` alone (one PeftModel, the adapter copied in and out per client, AdamW
rebuilt per client, the same seeded batches in the same order, the same weighted mean), in
the same process after the same warm-up. Prints the median seconds per round of each and
their ratio (the goal: at most 1.10).

``memory``: the process's resident memory after building the run (one frozen base), then
after a round of Local (each client keeps its own adapter) with 1, 10 and 100 clients: the
growth is the clients' adapters (1.8 MB each in float32), not a base per client (540 MB).
It also prints bytes per client round against full-model FedAvg.

    nice .venv/bin/python benchmarks/lora_round.py round [--clients 4] [--rounds 3]
    nice .venv/bin/python benchmarks/lora_round.py memory [--counts 1,10,100]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import psutil
import torch

from fedsim.config import load_config
from fedsim.runtime.executor import LocalExecutor
from fedsim.simulation import Simulation
from fedsim.streams import torch_seed
from lightning_modules.flat_params import ParamLayout

CONFIG = "configs/lora/shakespeare-smollm2-fedavg.yaml"


def config(clients: int, rounds: int, algorithm: str, extra: list[str]) -> Any:
    return load_config(CONFIG, [
        "runtime.executor=local", f"data.num_clients={clients}", f"rounds={rounds}",
        f"algorithm.name={algorithm}", "checkpoint_every=0", *extra,
    ])  # fmt: skip


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def fedsim_rounds(sim: Simulation) -> list[float]:
    """Seconds of each of fedsim's rounds (evaluation and training of every client)."""
    pool = LocalExecutor(sim.worker_spec, sim.data)
    try:
        result = sim.run(pool)
    finally:
        pool.close()
    return [float(r["seconds"]) for r in result.history if r.get("num_trained")]


def plain_rounds(sim: Simulation, rounds: int) -> list[float]:
    """The same rounds by hand: peft's model, AdamW, the same batches, the weighted mean."""
    from lightning_modules.causal_lm import CausalLM

    cfg, data = sim.cfg, sim.data
    args = dict(cfg.model.args)
    model = CausalLM(num_classes=data.dataset.model_kwargs()["num_classes"], **args)
    lora = [p for p in model.parameters() if p.requires_grad]
    layout = ParamLayout.from_module(model)
    global_params = sim.initial_params.clone()
    times = []
    for r in range(rounds):
        start = time.perf_counter()
        total, weight = torch.zeros_like(global_params, dtype=torch.float64), 0.0
        for c in range(data.num_clients):
            split = data.split(c)
            with torch.no_grad():
                for p, e in zip(lora, layout.entries, strict=True):
                    p.copy_(global_params[e.offset : e.offset + e.numel].view(e.shape))
            model.eval()
            with torch.no_grad():
                for s in range(0, len(split.test), cfg.client.eval_batch_size):
                    x, y = data.batch(split.test[s : s + cfg.client.eval_batch_size])
                    torch.nn.functional.cross_entropy(model(x), y, reduction="sum")
            model.train()
            opt = torch.optim.AdamW(lora, lr=cfg.client.lr)
            seed = torch_seed(cfg.seed, r, c)
            torch.random.default_generator.manual_seed(seed)
            order = split.train[torch.randperm(len(split.train),
                                               generator=torch.Generator().manual_seed(seed))]
            for s in range(0, len(order), cfg.client.batch_size):
                x, y = data.batch(order[s : s + cfg.client.batch_size])
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            flat = torch.cat([p.detach().reshape(-1) for p in lora])
            total += len(split.train) * flat.double()
            weight += len(split.train)
        global_params = (total / weight).float()
        times.append(time.perf_counter() - start)
    return times


def measure_round(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    cfg = config(args.clients, args.rounds, "fedavg", args.override)
    sim = Simulation(cfg)
    fedsim = fedsim_rounds(sim)[1:]  # round 0 warms up
    plain = plain_rounds(sim, args.rounds)[1:]
    a, b = statistics.median(fedsim), statistics.median(plain)
    print(f"fedsim round: {a:.2f} s   plain peft loop: {b:.2f} s   ratio {a / b:.3f}")
    print(f"RESULT clients={args.clients} fedsim_s={a:.2f} plain_s={b:.2f} ratio={a / b:.3f}")


def measure_memory(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    for count in [int(c) for c in args.counts.split(",")]:
        before = rss_mb()
        cfg = config(count, 1, "local", args.override)
        sim = Simulation(cfg)
        built = rss_mb()
        pool = LocalExecutor(sim.worker_spec, sim.data)
        try:
            result = sim.run(pool)
        finally:
            pool.close()
        after = rss_mb()
        adapter = sim.initial_params.numel()
        states = sum(int(v.numel()) for c in result.client_store.clients()
                     for v in result.client_store.get(c).values()
                     if isinstance(v, torch.Tensor))  # fmt: skip
        full = sum(p.numel() for p in sim_template_parameters(sim))
        print(f"clients={count:4d}  rss before {before:7.0f} MB  built {built:7.0f} MB  after a "
              f"round {after:7.0f} MB  client states {4 * states / 2**20:6.1f} MB  adapter "
              f"{adapter:,} params ({4 * adapter / 2**20:.2f} MB/client/way; full model "
              f"{4 * full / 2**20:.0f} MB)")  # fmt: skip


def sim_template_parameters(sim: Simulation) -> list[torch.Tensor]:
    from fedsim.pretrained import load_frozen_base

    args = dict(sim.cfg.model.args)
    base = load_frozen_base("model.args.source", args.get("source", "smollm2"),
                            args.get("dtype", "float32"))  # fmt: skip
    return list(base.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("round", "memory"))
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--counts", default="1,10,100")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--override", nargs="*", default=[], help="config overrides")
    args = parser.parse_args()
    np.set_printoptions(precision=3)
    measure_round(args) if args.what == "round" else measure_memory(args)


if __name__ == "__main__":
    main()
