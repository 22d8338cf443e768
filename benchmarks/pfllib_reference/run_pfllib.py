"""Run one PFLlib experiment on an exported fedsim partition and record its accuracy curve.

    python benchmarks/pfllib_reference/run_pfllib.py --pfllib PFLlib --record results.jsonl \\
        FedRep pathological 0 [--model CNN|CNNBN] [--tag T] [--fednova FedNova] [-- -pls 1]

Runs PFLlib's own ``system/main.py`` (unmodified) on ``MNIST_<path|diri>_s<SEED>`` (written by
export_partitions.py) with PFLlib's defaults except the federation and the rounds:
``-gr 20 -dev cpu -nc 20 -jr 1 -eg 1 -ls 1 -lbs 10 -lr 0.005``; anything after ``--`` is
passed on (an algorithm's key, e.g. ``-mu 1``). This file launches main.py in a child
process that first

- makes the run seed PFLlib's model seed: main.py seeds torch with 0 at import; the launcher
  turns that first ``torch.manual_seed`` call into ``manual_seed(SEED)`` and seeds numpy and
  ``random`` with SEED at the same point (PFLlib leaves them unseeded; they order clients).
  SEED 0 is PFLlib's stock behaviour;
- runs on one thread;
- with ``--model CNNBN``, builds :class:`FedAvgCNNBN` (FedAvgCNN with BatchNorm after each
  convolution, layers named ``bn1``/``bn2`` so that PFLlib's FedBN keeps them local) where
  main.py builds FedAvgCNN (main.py is given ``-m CNN``);
- stands in an empty ``cvxpy`` module if none is installed (main.py imports every server;
  only FedPAC's needs it).

``-algo FedNova`` / ``FedAvgH`` run fednova_pfllib.py instead (PFLlib has no FedNova; see
there). Reads PFLlib's ``../results/<dataset>_<algo>_<goal>_0.h5``; appends one JSON line
to ``--record``: the command, ``acc`` (the 21 evaluations: index i = after i rounds of
training, PFLlib evaluates before training), ``best`` (PFLlib's printed "Best accuracy"),
``best_round``, ``final`` and, for FedBABU, ``extra_evals_after_training`` (its fine-tuned
evaluation). Ditto's file interleaves the global and the personalized evaluation of every
round: its ``acc`` is the personalized one, ``global_acc`` the other (``curves``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXED = ["-gr", "20", "-dev", "cpu", "-nc", "20", "-jr", "1", "-eg", "1", "-ls", "1",
         "-lbs", "10", "-lr", "0.005"]  # fmt: skip
HARNESS = {"FedNova", "FedAvgH"}
# PFLlib servers that log the global and the personalized evaluation into rs_test_acc
TWO_EVALUATIONS_A_ROUND = {"Ditto"}


def launch(argv: list[str]) -> None:
    """In PFLlib's system/ folder: patch the seed, the thread count and the BN model, then run
    ``argv[0]`` (main.py or the FedNova harness) as ``__main__`` with ``argv[1:]``."""
    import random
    import runpy
    import types

    import numpy as np
    import torch

    seed = int(os.environ.get("PFL_SEED", "0"))
    torch.set_num_threads(1)
    sys.path.insert(0, os.getcwd())
    try:
        import cvxpy  # noqa: F401
    except ImportError:
        sys.modules["cvxpy"] = types.ModuleType("cvxpy")

    stock_seed = torch.manual_seed

    def first_seed(_value):  # main.py's module-level torch.manual_seed(0)
        torch.manual_seed = stock_seed
        np.random.seed(seed)
        random.seed(seed)
        return stock_seed(seed)

    torch.manual_seed = first_seed
    if os.environ.get("PFL_BN") == "1":
        from flcore.trainmodel import models

        sys.path.insert(0, str(HERE))
        from fedavg_cnn_bn import FedAvgCNNBN

        models.FedAvgCNN = FedAvgCNNBN
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")


def curves(algorithm: str, acc: list[float], rounds: int = 20) -> dict:
    """The record's ``acc``, ``best``, ``best_round``, ``final``... from PFLlib's
    ``rs_test_acc``: one evaluation before each of rounds 0..``rounds`` (after 0..rounds
    rounds of training). PFLlib's Ditto appends two per round to that one list, the global
    model's then the personalized models' (``evaluate()``, then ``evaluate_personalized()``):
    its curve is every second entry, and the global one is kept as ``global_acc``."""
    import numpy as np

    record: dict = {"n_evals": len(acc)}
    if algorithm in TWO_EVALUATIONS_A_ROUND:
        acc, record["global_acc"] = acc[1::2], acc[0::2]
    record["acc"] = acc
    curve = acc[: rounds + 1]
    best = int(np.argmax(curve))
    record.update(best=curve[best], best_round=best, final=curve[-1])
    if len(acc) > rounds + 1:  # FedBABU: the evaluation after its final fine-tune
        record["extra_evals_after_training"] = acc[rounds + 1 :]
    return record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--launch"]:
        launch(argv[1:])
        return 0
    extra: list[str] = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("algorithm", help="PFLlib's -algo (FedNova / FedAvgH: the harness)")
    parser.add_argument("partition", choices=["pathological", "dirichlet"])
    parser.add_argument("seed", type=int)
    parser.add_argument("--pfllib", type=Path, required=True, help="a PFLlib checkout")
    parser.add_argument("--fednova", type=Path, help="a JYWa/FedNova checkout (FedNova rows)")
    parser.add_argument("--model", default="CNN", choices=["CNN", "CNNBN"])
    parser.add_argument("--tag", default="", help="suffix of PFLlib's -go (the result name)")
    parser.add_argument("--record", type=Path, required=True, help="JSON lines, appended")
    parser.add_argument("--log-dir", type=Path, default=None, help="default: beside --record")
    args = parser.parse_args(argv)

    system = (args.pfllib / "system").resolve()
    dataset = f"MNIST_{args.partition[:4]}_s{args.seed}"
    goal = args.model + (f"-{args.tag}" if args.tag else "")
    name = f"{args.algorithm}_{args.partition}_s{args.seed}_{goal}"
    script = str(HERE / "fednova_pfllib.py") if args.algorithm in HARNESS else "main.py"
    command = [sys.executable, "-u", str(HERE / "run_pfllib.py"), "--launch", script,
               "-data", dataset, "-m", "CNN", "-algo", args.algorithm, *FIXED, "-go", goal,
               *extra]  # fmt: skip
    env = {**os.environ, "PFL_SEED": str(args.seed), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}  # fmt: skip
    if args.model == "CNNBN":
        env["PFL_BN"] = "1"
    if args.fednova is not None:
        env["FEDNOVA_PATH"] = str(args.fednova.resolve())
    shown = f"cd {system} && PFL_SEED={args.seed}" + (" PFL_BN=1" if args.model == "CNNBN" else "")
    shown += " " + shlex.join(command)
    print(shown, flush=True)
    log_dir = args.log_dir or args.record.parent / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    began = time.time()
    with open(log, "w") as out:
        rc = subprocess.call(command, cwd=system, env=env, stdout=out, stderr=subprocess.STDOUT)
    record = {"tag": name, "algo": args.algorithm, "partition": args.partition,
              "seed": args.seed, "model": args.model, "extra": extra, "rc": rc,
              "wall_s": round(time.time() - began, 1), "cmd": shown}  # fmt: skip
    found = re.search(r"Best accuracy\.\n([0-9.naninf]+)", log.read_text())
    record["printed_best"] = float(found.group(1)) if found else None
    h5 = args.pfllib / "results" / f"{dataset}_{args.algorithm}_{goal}_0.h5"
    if rc == 0 and h5.is_file():
        import h5py
        import numpy as np

        with h5py.File(h5, "r") as f:
            acc = np.array(f["rs_test_acc"]).tolist()
            record["train_loss"] = np.array(f["rs_train_loss"]).tolist()
        record.update(curves(args.algorithm, acc))
    with open(args.record, "a") as f:
        f.write(json.dumps(record) + "\n")
    curves_out = ("acc", "global_acc", "train_loss")
    print(json.dumps({k: v for k, v in record.items() if k not in curves_out}))
    return rc


if __name__ == "__main__":
    sys.exit(main())
