"""The validation split (``eval.validation_ratio``): carved from each client's train split,
disjoint, seeded, in partition.json; "best" selected on it and reported on test."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from helpers import TINY_MNIST, one_line_error, refused_check

from fedsim.config import load_config
from fedsim.data.dataset_types import ImageDataset
from fedsim.data.federated import ClientSplit, FederatedData
from fedsim.data.validation import carve_validation, validation_size
from fedsim.experiment import run_experiment
from fedsim.metrics import best_and_final

REPO = Path(__file__).resolve().parents[1]


def _federation(sizes: list[int]) -> FederatedData:
    n = 2 * sum(sizes)
    dataset = ImageDataset("toy", np.zeros((n, 1, 2, 2), np.uint8), np.arange(n) % 3, 3)
    clients, start = [], 0
    for size in sizes:
        train = np.arange(start, start + size, dtype=np.int64)
        test = np.arange(start + size, start + 2 * size, dtype=np.int64)
        clients.append(ClientSplit(train=train, test=test))
        start += 2 * size
    return FederatedData(dataset, clients, {"name": "toy"})


def test_validation_split_is_disjoint_seeded_and_recorded() -> None:
    data = _federation([40, 10, 2, 1])
    carved = carve_validation(data, 0.25, seed=3)
    # floor(0.25 n), at least one while two samples remain, never the last training sample
    assert [validation_size(n, 0.25) for n in (40, 10, 2, 1)] == [10, 2, 1, 0]
    for before, after in zip(data.clients, carved.clients, strict=True):
        assert len(after.val) == validation_size(len(before.train), 0.25)
        assert not set(after.val) & set(after.train) and not set(after.val) & set(after.test)
        np.testing.assert_array_equal(np.sort(np.concatenate([after.train, after.val])),
                                      before.train)  # fmt: skip
        np.testing.assert_array_equal(after.test, before.test)
    again, other = carve_validation(data, 0.25, seed=3), carve_validation(data, 0.25, seed=4)
    vals = [[c.val for c in d.clients] for d in (carved, again, other)]
    assert all(np.array_equal(a, b) for a, b in zip(vals[0], vals[1], strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(vals[0], vals[2], strict=True))
    summary = carved.partition_summary()
    assert [c["val"] for c in summary["clients"]] == [10, 2, 1, 0]
    assert [c["train"] for c in summary["clients"]] == [30, 8, 1, 1]
    assert summary["partition"]["validation"]["ratio"] == 0.25
    assert carve_validation(data, 0, seed=3) is data  # off: the very same federation
    assert "val" not in data.partition_summary()["clients"][0]


def test_best_selected_on_validation_differs_from_the_test_selected_round() -> None:
    history = [  # round 1 is best on test, round 2 on validation
        {"round": 0, "acc_weighted": 0.50, "val/acc_weighted": 0.40},
        {"round": 1, "acc_weighted": 0.80, "val/acc_weighted": 0.55},
        {"round": 2, "acc_weighted": 0.70, "val/acc_weighted": 0.60},
        {"round": 3, "acc_weighted": 0.65, "val/acc_weighted": 0.60},  # a tie: the earlier
    ]
    out = best_and_final(history)
    assert out["selected_on"] == "validation"
    assert out["best"]["round"] == 2 and out["best"]["acc_weighted"] == 0.70
    assert out["best"]["val/acc_weighted"] == 0.60
    assert out["best_on_test"]["round"] == 1 and out["best_on_test"]["acc_weighted"] == 0.80
    plain = best_and_final([{k: v for k, v in h.items() if k[:4] != "val/"} for h in history])
    assert plain["selected_on"] == "test" and plain["best"]["round"] == 1
    assert "best_on_test" not in plain


def test_a_run_with_validation_and_flops_writes_both(tmp_path) -> None:
    cfg = load_config("configs/quickstart.yaml", [
        *TINY_MNIST, "rounds=2", "data.max_samples=300", "data.num_clients=3",
        "eval.validation_ratio=0.2", "eval.count_flops=true", "eval.holdout_clients=1",
    ])  # fmt: skip
    result = run_experiment(cfg, tmp_path / "run", progress=False)
    run = tmp_path / "run"
    partition = json.loads((run / "partition.json").read_text())
    vals = [c["val"] for c in partition["clients"]]
    assert all(v > 0 for v in vals) and partition["partition"]["validation"]["ratio"] == 0.2
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all("val/acc_weighted" in m and "val/unseen/acc_weighted" in m for m in metrics)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["selected_on"] == "validation" and "best_on_test" in summary
    best = max(metrics, key=lambda m: (m["val/acc_weighted"], -m["round"]))
    assert summary["best"]["round"] == best["round"] == result.summary["best"]["round"]
    rows = list(csv.DictReader(open(run / "clients.csv")))
    assert all(r["val_accuracy"] != "" for r in rows)
    trained = [m for m in metrics if m["round"] < 2]
    assert all(m["flops_per_client"] > 0 for m in trained)
    cost = summary["cost"]  # per client round, over the training rounds
    assert cost["flops_per_client_round"] == np.mean([m["flops_per_client"] for m in trained])
    up = np.mean([m["bytes_up"] / m["num_trained"] for m in trained])
    assert cost["bytes_up_per_client_round"] == up and "peak_memory_mib" not in cost  # a CPU


def test_validation_ratio_is_refused_in_one_line(capsys, tmp_path) -> None:
    line = refused_check("eval.validation_ratio=1", capsys, tmp_path)
    assert "eval.validation_ratio" in line and "(0, 1)" in line


def test_a_search_ranked_on_validation_needs_a_validation_split(capsys, tmp_path) -> None:
    config = str(REPO / "configs" / "quickstart.yaml")
    search = ["--search", "client.lr=choice(0.01,0.05)", "--samples", "1"]
    argv = ["tune", config, *search, "--metric", "val/acc_weighted"]
    line = one_line_error(argv, capsys, tmp_path)
    assert line == (
        "fedsim: error: --metric='val/acc_weighted': needs a validation split: set "
        "eval.validation_ratio (e.g. 0.1)"
    )
