"""Results over seeds: the 95 % interval and the paired t test against hand values, clients
hurt on two constructed run folders, and ``fedsim compare`` on constructed folders."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import yaml

from fedsim.errors import ConfigError
from fedsim.search.compare import compare_methods, load_methods, run_numbers, versus
from fedsim.search.compare_table import plotted_metric, write_comparison
from fedsim.search.stats import paired_difference, supported, t_interval
from fedsim.tracking.clients_hurt import clients_hurt
from fedsim.tracking.run_data import load_run

T_2 = 0.95 * math.sqrt(2 / (1 - 0.95**2))  # Student t, 2 degrees of freedom: 0.975 quantile


def test_interval_and_paired_t_test_by_hand() -> None:
    lo, hi = t_interval([0.80, 0.82, 0.84])  # mean 0.82, sample std 0.02
    half = T_2 * 0.02 / math.sqrt(3)
    assert (lo, hi) == pytest.approx((0.82 - half, 0.82 + half), abs=1e-12)
    assert all(math.isnan(v) for v in t_interval([0.8]))  # one seed has no interval
    d = paired_difference([0.80, 0.85, 0.83], [0.78, 0.80, 0.80])  # differences .02 .05 .03
    sd = math.sqrt(((0.02 - 0.1 / 3) ** 2 + (0.05 - 0.1 / 3) ** 2 + (0.03 - 0.1 / 3) ** 2) / 2)
    t = (0.1 / 3) / (sd / math.sqrt(3))
    assert d["n"] == 3 and d["mean"] == pytest.approx(0.1 / 3)
    # two-sided p of Student's t with 2 degrees of freedom: 1 - t / sqrt(t^2 + 2)
    assert d["p"] == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-9)
    assert d["lo"] == pytest.approx(0.1 / 3 - T_2 * sd / math.sqrt(3))
    assert not supported(d)  # p = 0.063
    assert supported(paired_difference([0.80, 0.85, 0.83], [0.70, 0.76, 0.72]))


def write_run(
    folder: Path,
    name: str,
    algorithm: str,
    seed: int,
    accuracy: list[float],
    n: list[int],
    *,
    validated: bool = False,
    held: list[float] | None = None,
    acc: float = 0.5,
    final_extra: dict | None = None,
) -> Path:
    """A finished run folder by hand: 2 evaluated rounds; round 1 holds ``accuracy``."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(
        yaml.safe_dump({"name": name, "seed": seed, "algorithm": {"name": algorithm}})
    )
    clients = [{"client": i, "train": 3 * k, "test": k} for i, k in enumerate(n)]
    (folder / "partition.json").write_text(json.dumps({"clients": clients}))
    rows = [{"round": r, "acc_weighted": acc, "bytes_up": 4e6, "bytes_down": 8e6,
             "num_trained": 2, "flops_per_client": 3e9} for r in (0, 1)]  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    best = {"round": 1, "acc_weighted": acc}  # on validation or on test: the last round
    summary = {
        "best": best,
        "final": {"round": 1, "acc_weighted": acc, "acc_std": 0.1, "acc_worst10": acc / 2,
                  **(final_extra or {})},  # fmt: skip
        "selected_on": "validation" if validated else "test",
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    with open(folder / "clients.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["client", "round", "accuracy", "loss", "n", "classes", "held_out"])
        for r in (0, 1):
            for c, (a, k) in enumerate(zip(accuracy, n, strict=True)):
                writer.writerow([c, r, a if r == 1 else 0.1, 1.0, k, 2, False])
            for c, a in enumerate(held or []):
                writer.writerow([len(n) + c, r, a, 1.0, 100, 2, True])
    return folder


def test_clients_hurt_on_two_constructed_runs(tmp_path) -> None:
    n = [100, 100, 100, 25]
    ref = write_run(tmp_path / "ref", "ref", "fedavg", 0, [0.50, 0.50, 0.90, 0.60], n,
                    held=[0.5])  # fmt: skip
    run = write_run(tmp_path / "run", "run", "ditto", 0, [0.70, 0.45, 0.70, 0.66], n,
                    held=[0.2])  # fmt: skip
    hurt = clients_hurt(load_run(run), load_run(ref))
    # noise = 1.96 sqrt((p_a (1 - p_a) + p_r (1 - p_r)) / n):
    #   client 0: +0.20 vs 1.96 sqrt((.21 + .25) / 100) = 0.1329 -> better
    #   client 1: -0.05 vs 1.96 sqrt((.2475 + .25) / 100) = 0.1383 -> within noise
    #   client 2: -0.20 vs 1.96 sqrt((.21 + .09) / 100) = 0.1074 -> worse
    #   client 3: +0.06 vs 1.96 sqrt((.2244 + .24) / 25) = 0.2671 -> within noise
    assert hurt.noise[0] == pytest.approx(1.96 * math.sqrt(0.46 / 100))
    assert (hurt.better, hurt.worse, hurt.within) == (0.25, 0.25, 0.5)
    assert hurt.worst_loss == pytest.approx(0.20)
    assert hurt.selection == "final round"
    unseen = clients_hurt(load_run(run), load_run(ref), held_out=True)
    assert list(unseen.clients) == [4] and unseen.worse == 1.0  # -0.3 vs noise 0.1225
    other = write_run(tmp_path / "other", "x", "local", 0, [0.5] * 4, [100, 100, 100, 24])
    with pytest.raises(ConfigError, match="client 3 has 24 test samples"):
        clients_hurt(load_run(run), load_run(other))


def test_compare_reads_seeds_pairs_them_and_writes_the_table(tmp_path) -> None:
    n = [100, 100]
    for seed, (a, b) in enumerate([(0.80, 0.78), (0.85, 0.80), (0.83, 0.80)]):
        write_run(tmp_path / "repro" / "runs" / f"m-seed{seed}", "m", "ditto", seed,
                  [0.9, 0.5], n, validated=True, acc=a)  # fmt: skip
        write_run(tmp_path / "repro" / "runs" / f"r-seed{seed}", "r", "fedavg", seed,
                  [0.5, 0.5], n, acc=b)  # fmt: skip
    methods = load_methods([tmp_path / "repro"])
    assert [(m.label, sorted(m.runs)) for m in methods] == [
        ("m (ditto)", [0, 1, 2]),
        ("r (fedavg)", [0, 1, 2]),
    ]
    numbers = run_numbers(methods[0].runs[0])  # per client round: bytes / num_trained
    assert numbers["mb_up"] == 2.0 and numbers["mb_down"] == 4.0 and numbers["flops"] == 3.0
    assert numbers["val_acc"] == 0.80  # the validation-selected round's test accuracy
    assert math.isnan(run_numbers(methods[1].runs[0])["val_acc"])  # no validation: n/a
    vs = versus(methods[0], methods[1])
    assert vs["acc"]["p"] == pytest.approx(
        paired_difference([0.80, 0.85, 0.83], [0.78, 0.80, 0.80])["p"]
    )
    assert vs["better"] == 0.5 and vs["worse"] == 0.0  # +0.40 on client 0, 0 on client 1
    written = write_comparison(methods, ["fedavg"], tmp_path / "out")
    table = written[0].read_text()
    assert "| m (ditto) | 3 | 82.67 [" in table and "| r (fedavg) | 3 |" in table
    assert "p=0.063" in table and "paired t test" in table
    assert "validation-selected round vs the reference's final round" in table
    assert all(p.is_file() for p in written)
    with pytest.raises(ConfigError, match="--reference='local': matches no method"):
        write_comparison(methods, ["local"], tmp_path / "out")


def test_language_model_runs_get_perplexity_and_held_out_columns(tmp_path) -> None:
    """Next-token runs with held-out clients: perplexity (as is, not in percent) and the
    held-out accuracy and perplexity join the table; runs without them add no column."""
    for seed, ppl in enumerate([20.0, 22.0, 24.0]):
        extra = {"perplexity": ppl, "unseen/acc_weighted": 0.3, "unseen/perplexity": 2 * ppl}
        write_run(tmp_path / "lm" / f"a-seed{seed}", "a", "fedavg", seed, [0.5, 0.5],
                  [100, 100], final_extra=extra)  # fmt: skip
    methods = load_methods([tmp_path / "lm"])
    assert run_numbers(methods[0].runs[1])["ppl"] == 22.0
    table = write_comparison(methods, [], tmp_path / "out")[0].read_text()
    half = T_2 * 2.0 / math.sqrt(3)  # sample std of 20, 22, 24 is 2
    assert f"| 22.00 [{22 - half:.2f}, {22 + half:.2f}] | 30.00 [30.00, 30.00] | 44.00 [" in table
    assert "perplexity (final) | held-out acc (final) | held-out perplexity (final)" in table
    assert "perplexity (val-selected)" not in table  # no run was validated
    assert "lower is better" in table and "never trained" in table
    write_run(tmp_path / "img" / "b-seed0", "b", "fedavg", 0, [0.5, 0.5], [100, 100])
    plain = write_comparison(load_methods([tmp_path / "img"]), [], tmp_path / "out2")
    assert "perplexity" not in plain[0].read_text()
    # methods.png draws the table's own metric: perplexity (log) for these runs, else accuracy
    lm_rows, _ = compare_methods(methods, [])
    assert plotted_metric(lm_rows) == (("ppl", "val_ppl"), "test perplexity (lower is better)",
                                       1.0, True)  # fmt: skip
    img_rows, _ = compare_methods(load_methods([tmp_path / "img"]), [])
    assert plotted_metric(img_rows)[0] == ("acc", "val_acc")
    assert plotted_metric(img_rows + lm_rows)[0] == ("acc", "val_acc")  # only where all have it


def test_reproduce_tables_end_with_the_comparison(tmp_path) -> None:
    from ray_jobs.reproduce import RunSpec, write_results

    specs, summaries = [], []
    for label, algorithm, acc in (("m", "ditto", 0.8), ("r", "fedavg", 0.7)):
        for seed in (0, 1):
            folder = tmp_path / "runs" / f"{label}-seed{seed}"
            accuracy, validated = [0.9, 0.5], label == "m"
            write_run(folder, label, algorithm, seed, accuracy, [100, 100],
                      validated=validated, acc=acc + seed / 100)  # fmt: skip
            specs.append(RunSpec(f"{label}.yaml", f"{label} ({algorithm})", seed, {}, str(folder)))
            summaries.append(json.loads((folder / "summary.json").read_text()))
    write_results(tmp_path, specs, summaries, [None] * 4)
    table = (tmp_path / "results.md").read_text()
    assert "best acc_weighted (selected on test or validation) |" in table
    assert "| m (ditto) | 2 | 80.50 ± 0.71 |" in table  # the seeds' table, as before
    assert "| vs r (fedavg) | seeds |" in table  # the default reference: the one FedAvg
    # the per-client gain over clients x seeds (the same accuracies: 0), then Δ acc over seeds
    row = "| m (ditto) | 2 | 0% | 0% | 100% | 0.0 | +0.00 [+0.00, +0.00] | +10.00 [+10.00, +10.00]"
    assert row + " | n/a |" in table
    assert (tmp_path / "compare.csv").is_file() and (tmp_path / "plots" / "methods.png").is_file()


def test_a_cell_over_runs_without_the_metric_leaves_them_out() -> None:
    """The notebook's comparison over runs some of which lack the metric (FEDSIM_METRIC=
    perplexity beside image runs: None) shows the others' mean, and n/a when none has it."""
    from fedsim.search.stats import mean_std_cell

    assert mean_std_cell([20.0, None, 22.0], scale=1.0, digits=1) == "21.0 ± 1.4"
    assert mean_std_cell([None, None], scale=1.0) == "n/a"
