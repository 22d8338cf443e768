"""Export fedsim's mnist-5k partitions: the index lists (one JSON per partition and seed) and
the same digits in PFLlib's per-client dataset layout, so that PFLlib trains and tests every
client on exactly the samples fedsim does.

    python benchmarks/pfllib_reference/export_partitions.py --out pfl_ref \\
        [--pfllib PFLlib] [--seeds 0 1 2]

Writes ``<out>/partitions/<partition>-seed<S>.json`` (per-client ``train``/``test`` index
lists into fedsim's mnist-5k dataset, fedsim's order) and ``<out>/partitions/SHA256SUMS``;
with ``--pfllib``, also ``<PFLlib>/dataset/MNIST_<path|diri>_s<S>/{train,test}/<k>.npz``,
each ``np.savez_compressed(f, data={"x": float32 (n, 1, 28, 28), "y": int64 (n,)})``: the
format PFLlib's ``read_data`` loads (client file ``<k>`` is fedsim client ``k``). Pixels are
``x / 127.5 - 1`` = PFLlib's ``Normalize(0.5, 0.5)``; every file is asserted equal to what
fedsim's ``ImageDataset.batch`` returns for those indices. Dataset folders are named
``MNIST_*`` so that PFLlib's ``-m CNN`` builds FedAvgCNN(1, 10, dim=1024).

Every partition is also checked against the runs' own configs
(``configs/personalization/mnist5k-<pat|dir>-fedavg.yaml``): same client index lists, so the
fedsim rows of benchmarks/results/personalization.md read these very files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fedsim.config import load_config  # noqa: E402
from fedsim.simulation import build_data  # noqa: E402

DATA = ["data.name=mnist-5k", "data.num_clients=20"]
PATHOLOGICAL = ["data.partition.name=pathological", "data.partition.classes_per_client=2"]
DIRICHLET = ["data.partition.name=dirichlet", "data.partition.alpha=0.1"]
PARTITIONS = {"pathological": ("pat", PATHOLOGICAL), "dirichlet": ("dir", DIRICHLET)}


def export(out: Path, pfllib: Path | None, seeds: list[int]) -> list[str]:
    (out / "partitions").mkdir(parents=True, exist_ok=True)
    sums = []
    for name, (short, partition) in PARTITIONS.items():
        for seed in seeds:
            overrides = [*DATA, *partition, f"seed={seed}"]
            data = build_data(load_config(None, overrides))
            ds = data.dataset
            record = {
                "partition": name,
                "seed": seed,
                "overrides": overrides,
                "dataset_len": int(len(ds)),
                "server_samples": int(data.server_samples),
                "partition_info": (
                    data.partition if isinstance(data.partition, dict) else str(data.partition)
                ),
                "clients": [
                    {"train": c.train.tolist(), "test": c.test.tolist()} for c in data.clients
                ],
            }
            path = out / "partitions" / f"{name}-seed{seed}.json"
            path.write_text(json.dumps(record, default=str))
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            sums.append(f"{digest}  partitions/{path.name}")

            # the configs the fedsim rows ran read the same clients
            config = ROOT / "configs" / "personalization" / f"mnist5k-{short}-fedavg.yaml"
            ran = build_data(load_config(config, [f"seed={seed}"]))
            for a, b in zip(data.clients, ran.clients, strict=True):
                assert np.array_equal(a.train, b.train) and np.array_equal(a.test, b.test), config

            if pfllib is not None:
                folder = pfllib / "dataset" / f"MNIST_{name[:4]}_s{seed}"
                for k, client in enumerate(data.clients):
                    for split, idx in (("train", client.train), ("test", client.test)):
                        idx = np.asarray(idx, dtype=np.int64)
                        x = ds.images[idx].astype(np.float32) / np.float32(127.5) - np.float32(1)
                        y = ds.labels[idx].astype(np.int64)
                        xb, yb = ds.batch(idx)
                        assert np.array_equal(xb.numpy(), x) and np.array_equal(yb.numpy(), y)
                        (folder / split).mkdir(parents=True, exist_ok=True)
                        with open(folder / split / f"{k}.npz", "wb") as f:
                            np.savez_compressed(f, data={"x": x, "y": y})
            sizes = [len(c.train) for c in data.clients]
            print(f"{name} seed {seed}: train sizes {sizes}  sha256 {digest}")
    (out / "partitions" / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    return sums


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="writes <out>/partitions/")
    parser.add_argument("--pfllib", type=Path, default=None, help="a PFLlib checkout")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = parser.parse_args(argv)
    export(args.out, args.pfllib, args.seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
