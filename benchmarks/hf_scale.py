"""An hf: dataset the size of FEMNIST: conversion, a cached start, memory, and a round.

Builds (once) a table in flwrlabs/femnist's schema with FEMNIST's size: 805,263 28x28 grey
images (real Fashion-MNIST images, cycled) over 3,597 writers whose sample counts follow
LEAF's published mean and spread (about 224 +- 89), saved with ``save_to_disk``. Then, each
step in a fresh process so its peak memory is its own:

  convert  the first run's build: Arrow -> fedsim's arrays, and the cache written
  cached   a later run's build: the cache memory-mapped
  round    FedAvg on Ray, 2 workers, 10 % of the writers sampled: the seconds of a
           training round, peak memory of the driver and of each worker
  fmnist   the same round on Fashion-MNIST split over as many clients as that round
           samples (every one sampled), so both rounds train about the same samples

Prints one line per step and a ``RESULT`` line; seconds per 1,000 trained samples compare
the rounds ("registered clients must not slow a round").

``--tabular`` measures instead the first conversion of a million tabular rows: a parquet
file of 16 numeric columns, a label and a writer column (1,000 writers), read as natural
clients for ``mlp`` (columns go from Arrow to numpy whole, not row by row).

    .venv/bin/python benchmarks/hf_scale.py [--folder /tmp/fedsim-femnist-size] [--workers 2]
    .venv/bin/python benchmarks/hf_scale.py --tabular [--folder /tmp/fedsim-tabular]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROWS, WRITERS = 805_263, 3_597
FOLDER = "/tmp/fedsim-femnist-size"
MEAN, SPREAD = 224.0, 89.0  # samples per writer (LEAF's FEMNIST statistics)


def writer_sizes(rng: np.random.Generator) -> np.ndarray:
    sizes = np.clip(rng.normal(MEAN, SPREAD, WRITERS), 20, None)
    sizes = np.floor(sizes / sizes.sum() * ROWS).astype(np.int64)
    sizes[: ROWS - sizes.sum()] += 1  # exactly ROWS
    return sizes


def build_table(folder: Path) -> None:
    """The FEMNIST-sized table in flwrlabs/femnist's schema, saved with save_to_disk."""
    import datasets
    from PIL import Image

    from fedsim.data.datasets import load_dataset

    fmnist = load_dataset("fashion-mnist", "data", download=False)
    rng = np.random.default_rng(0)
    writers = np.repeat(np.arange(WRITERS), writer_sizes(rng))[rng.permutation(ROWS)]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from hf_fixtures import femnist_features  # the tests' copy of the schema

    features = femnist_features()

    def rows():
        for i in range(ROWS):
            j = i % len(fmnist)
            yield {
                "image": Image.fromarray(fmnist.images[j, 0], mode="L"),
                "writer_id": f"f{writers[i]:04d}_{writers[i] % 100:02d}",
                "character": int(fmnist.labels[j]),
                "hsf_id": int(writers[i] % 4),
            }

    table = datasets.Dataset.from_generator(rows, features=features)
    table.save_to_disk(str(folder))


TABULAR_ROWS, TABULAR_COLUMNS, TABULAR_WRITERS = 1_000_000, 16, 1_000


def build_parquet(path: Path) -> None:
    """A million rows: 16 float columns, a 10-class label, a writer column (1,000 writers)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    columns = {f"f{i}": rng.normal(size=TABULAR_ROWS) for i in range(TABULAR_COLUMNS)}
    columns["label"] = rng.integers(0, 10, TABULAR_ROWS)
    writers = rng.integers(0, TABULAR_WRITERS, TABULAR_ROWS)
    columns["writer"] = pa.array([f"w{w:04d}" for w in writers])
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


def tabular(folder: Path) -> int:
    """The first conversion of a million tabular rows (and the cache written), a cached start."""
    import shutil

    table = folder / "rows.parquet"
    if not table.exists():
        build_parquet(table)
    root = folder / "root"
    shutil.rmtree(root / "hf-cache", ignore_errors=True)
    features = ",".join(f"f{i}" for i in range(TABULAR_COLUMNS))
    overrides = [f"data.name=hf:{table}", f"data.root={root}", f"data.input_column=[{features}]",
                 "data.partition.name=natural", "data.partition.by=writer",
                 f"data.num_clients={TABULAR_WRITERS}", "data.min_samples=2", "model.name=mlp",
                 "runtime.executor=local"]  # fmt: skip
    convert = step("convert", overrides)
    print(f"convert  {json.dumps(convert)}", flush=True)
    cached = step("cached", overrides)
    print(f"cached   {json.dumps(cached)}", flush=True)
    print(
        f"RESULT tabular rows={convert['samples']} clients={convert['clients']} "
        f"convert_s={convert['build_s'] + convert['cache_write_s']:.1f} "
        f"cached_start_s={cached['build_s']:.2f} driver_peak_mb={convert['driver_peak_mb']}"
    )
    return 0


STEP = r"""
import json, resource, sys, time
from fedsim.config import load_config
from fedsim.simulation import Simulation, build_data
args = json.loads(sys.argv[1])
cfg = load_config(None, args["overrides"])
began = time.perf_counter()
data = build_data(cfg)
out = {"build_s": time.perf_counter() - began, "clients": data.num_clients,
       "samples": int(sum(data.train_sizes()) + sum(data.test_sizes()))}
if args["step"] == "convert":
    from fedsim.data.hf import accept
    began = time.perf_counter()
    accept(cfg.data)
    out["cache_write_s"] = time.perf_counter() - began
if args["step"] in ("round", "fmnist"):
    import ray
    from fedsim.runtime.factory import make_executor
    sim = Simulation(cfg, data)
    executor = make_executor(cfg.runtime, sim.worker_spec, sim.data)
    pids = [ray.get(a.ready.remote())["pid"] for a in executor._actors]
    result = sim.run(executor)
    round1 = result.history[1]
    cohort = sim.sample_cohort(1)
    out["round_s"] = round1["seconds"]
    out["trained_samples"] = int(sum(data.train_sizes()[c] for c in cohort))
    out["sampled"] = len(cohort)
    def hwm(pid):
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    out["worker_peak_mb"] = [round(hwm(p)) for p in pids]
    import psutil
    # pages only this worker holds (the object store's shared data excluded)
    out["worker_unique_mb"] = [psutil.Process(p).memory_full_info().uss >> 20 for p in pids]
    executor.close()
out["driver_peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print("STEP " + json.dumps(out))
"""


def step(name: str, overrides: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", STEP, json.dumps({"step": name, "overrides": overrides})],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("STEP ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][5:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=FOLDER)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tabular", action="store_true", help="a million tabular rows instead")
    args = parser.parse_args()
    if args.tabular:
        return tabular(Path(args.folder if args.folder != FOLDER else "/tmp/fedsim-tabular"))
    folder = Path(args.folder)
    table = folder / "femnist"
    if not (table / "dataset_info.json").exists():
        began = time.perf_counter()
        build_table(table)
        print(f"built the table in {time.perf_counter() - began:.0f} s: {table}", flush=True)
    root = folder / "root"
    common = ["rounds=2", "eval_every=1000", "client.batch_size=10", "client.lr=0.05",
              "runtime.executor=ray", f"runtime.workers={args.workers}",
              "runtime.cpus_per_worker=1", "runtime.device=cpu"]  # fmt: skip
    femnist = [f"data.name=hf:{table}", f"data.root={root}", "data.label_column=character",
               "data.partition.name=natural", "data.partition.by=writer_id",
               f"data.num_clients={WRITERS}", "data.min_samples=2", "join_ratio=0.1"]  # fmt: skip
    import shutil

    shutil.rmtree(root / "hf-cache", ignore_errors=True)
    convert = step("convert", [*common, *femnist])
    print(f"convert  {json.dumps(convert)}", flush=True)
    cached = step("cached", [*common, *femnist])
    print(f"cached   {json.dumps(cached)}", flush=True)
    round_ = step("round", [*common, *femnist])
    print(f"round    {json.dumps(round_)}", flush=True)
    same = [f"data.num_clients={round_['sampled']}", "join_ratio=1.0"]
    fmnist = step("fmnist", [*common, "data.name=fashion-mnist", "data.partition.name=iid", *same])
    print(f"fmnist   {json.dumps(fmnist)}", flush=True)
    per_k = {k: 1000 * r["round_s"] / r["trained_samples"] for k, r in
             (("femnist_size", round_), ("fmnist", fmnist))}  # fmt: skip
    print(
        f"RESULT rows={convert['samples']} clients={convert['clients']} "
        f"convert_s={convert['build_s'] + convert['cache_write_s']:.1f} "
        f"cached_start_s={cached['build_s']:.2f} driver_peak_mb={round_['driver_peak_mb']} "
        f"worker_peak_mb={max(round_['worker_peak_mb'])} "
        f"worker_unique_mb={max(round_['worker_unique_mb'])} "
        f"fmnist_worker_unique_mb={max(fmnist['worker_unique_mb'])} "
        f"round_s_per_1k_samples={per_k['femnist_size']:.3f} "
        f"fmnist_round_s_per_1k_samples={per_k['fmnist']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
