"""Seconds per training round through the Ray pool, per dataset: images beside Shakespeare.

FedAvg, 20 clients all sampled, 1 local epoch, batch 10, 2 worker actors; rounds without
evaluation in between (evaluation only in round 0 and the last). Each dataset is cut to
about the same number of training samples per round (``--train-samples``), so the seconds
compare the models' cost per sample: FedAvgCNN on 28x28 images against the char-LSTM on 80
characters. Shakespeare takes the 20 largest roles, each cut to its first samples
(``data.max_client_samples``); the images are split IID after a stratified subset.

One line per dataset: ``RESULT dataset=<name> s_per_round=<x> ms_per_train_sample=<y>``.

    .venv/bin/python benchmarks/round_time.py [--rounds 3] [--train-samples 4000]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics

import ray

from fedsim.config import load_config
from fedsim.runtime.ray_cluster import use_private_ray_defaults
from fedsim.runtime.ray_executor import RayExecutor
from fedsim.simulation import Simulation

CLIENTS = 20
DATASETS = {  # name -> (model, learning rate, overrides that size it)
    "mnist-5k": ("fedavg_cnn", 0.05, "data.max_samples"),
    "fashion-mnist": ("fedavg_cnn", 0.05, "data.max_samples"),
    "shakespeare": ("char_lstm", 0.8, "data.max_client_samples"),
}


def size_override(dataset: str, train_samples: int) -> str:
    """The key and value giving ``dataset`` about ``train_samples`` training samples."""
    key = DATASETS[dataset][2]
    if key == "data.max_client_samples":  # 80% of each role's samples train
        return f"{key}={round(train_samples / CLIENTS / 0.8)}"
    return f"{key}={round(train_samples / 0.75)}"  # data.train_ratio 0.75


def seconds_per_round(dataset: str, args: argparse.Namespace) -> tuple[float, int]:
    """Median seconds of the training-only rounds, and training samples per round."""
    model, lr, _ = DATASETS[dataset]
    cfg = load_config(
        "configs/quickstart.yaml",
        [
            f"data.name={dataset}",
            f"data.num_clients={CLIENTS}",
            "data.partition.name=iid",
            size_override(dataset, args.train_samples),
            f"model.name={model}",
            f"rounds={args.rounds}",
            "join_ratio=1.0",
            f"eval_every={args.rounds}",
            "client.epochs=1",
            "client.batch_size=10",
            f"client.lr={lr}",
            "algorithm.name=fedavg",
            "runtime.executor=ray",
            "runtime.workers=2",
        ],
    )
    sim = Simulation(cfg)
    executor = RayExecutor(cfg.runtime, sim.worker_spec, sim.data)
    try:
        result = sim.run(executor)
    finally:
        executor.close()
    seconds = [h["seconds"] for h in result.history]
    train = int(sim.data.train_sizes().sum())
    print(
        f"{dataset} ({model}): {train} training samples a round; seconds per round "
        + " ".join(f"{s:.1f}" for s in seconds),
        flush=True,
    )
    return statistics.median(seconds[1 : args.rounds]), train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-samples", type=int, default=4000)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    args = parser.parse_args()
    use_private_ray_defaults()  # as RayExecutor does for its own Ray
    load = os.getloadavg()
    print(f"cores={os.cpu_count()} load average before: {load[0]:.2f} {load[1]:.2f}", flush=True)
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    results = []
    try:
        for dataset in args.datasets:
            results.append((dataset, *seconds_per_round(dataset, args)))
    finally:
        ray.shutdown()
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f}")
    for dataset, s, train in results:
        print(
            f"RESULT dataset={dataset} s_per_round={s:.3f} "
            f"ms_per_train_sample={1000 * s / train:.3f}"
        )


if __name__ == "__main__":
    main()
