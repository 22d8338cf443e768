"""Judged on the table's own metric (issue 60): ``eval.select_on`` picks the best round by
loss, perplexity or accuracy; next-token runs record each client's per-token loss spread,
and ``fedsim compare`` counts clients hurt on perplexity with that noise band and shows a
per-client table of the reported metric, clients named by the data."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.metrics import best_and_final
from fedsim.rounds.records import loss_spread
from fedsim.runtime.training import EvalResult
from fedsim.search.compare import load_methods, versus
from fedsim.search.compare_table import write_comparison
from fedsim.tracking.hurt_metric import client_table_markdown, clients_hurt_on_metric, judged_on
from fedsim.tracking.run_data import load_run

KEYS = {"acc_mean": 0, "acc_std": 0, "acc_worst10": 0}


def _history() -> list[dict]:
    """Validation accuracy is best at round 1, validation loss at round 2, test loss at 0."""
    rows = [(0.3, 2.0, 0.30, 3.0), (0.6, 1.5, 0.70, 2.5), (0.5, 1.8, 0.65, 2.0)]
    return [{"round": r, "acc_weighted": acc, "loss": loss, "perplexity": math.exp(loss),
             "val/acc_weighted": vacc, "val/loss": vloss, "val/perplexity": math.exp(vloss),
             **KEYS} for r, (acc, loss, vacc, vloss) in enumerate(rows)]  # fmt: skip


def test_select_on_picks_the_round_by_its_metric_by_hand() -> None:
    history = _history()
    auto = best_and_final(history)  # perplexity recorded: next-token, so the loss decides
    assert auto["best"]["round"] == 2 and auto["selected_by"] == "val/loss"
    assert auto["best_on_test"]["round"] == 1  # test loss 1.5 is lowest at round 1
    acc = best_and_final(history, "accuracy")
    assert acc["best"]["round"] == 1 and acc["selected_by"] == "val/acc_weighted"
    ppl = best_and_final(history, "perplexity")
    assert ppl["best"]["round"] == 2 and ppl["selected_by"] == "val/perplexity"
    assert best_and_final(history, "auto", tokens=False)["best"]["round"] == 1
    plain = [{k: v for k, v in h.items() if not k.startswith("val/")} for h in history]
    test = best_and_final(plain, "loss")
    assert (test["best"]["round"], test["selected_by"], test["selected_on"]) == (1, "loss", "test")


def test_select_on_is_checked_when_the_config_is_read() -> None:
    assert load_config(None, ["eval.select_on=perplexity"]).eval.select_on == "perplexity"
    with pytest.raises(ConfigError, match="eval.select_on.*allowed: auto, loss, perplexity"):
        load_config(None, ["eval.select_on=ppl"])


def test_perplexity_selection_needs_next_token_data() -> None:
    from fedsim.simulation import Simulation

    cfg = load_config(None, ["eval.select_on=perplexity", "data.num_clients=4", "rounds=1"])
    with pytest.raises(ConfigError, match="eval.select_on='perplexity': needs next-token"):
        Simulation(cfg)


def test_loss_spread_of_a_client_by_hand() -> None:
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    y = torch.tensor([0, 0, 1])
    losses = torch.nn.functional.cross_entropy(logits, y, reduction="none").double()
    result = EvalResult(0, float(losses.sum()), 3, float((losses**2).sum()))
    assert loss_spread(result) == pytest.approx(float(losses.std(unbiased=False)))


def write_lm_run(folder: Path, name: str, seed: int, loss: list[float], sd: list[float],
                 n: list[int]) -> Path:  # fmt: skip
    """A finished next-token run by hand: round 1 holds each client's loss and its spread;
    clients are named by the data (natural clients of a ``client`` column)."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(
        yaml.safe_dump({"name": name, "seed": seed, "algorithm": {"name": name}})
    )
    clients = [{"client": i, "client_id": f"en-{i}", "test": k} for i, k in enumerate(n)]
    partition = {"clients": clients, "partition": {"by": "client_id", "clients": clients}}
    (folder / "partition.json").write_text(json.dumps(partition))
    (folder / "metrics.jsonl").write_text(json.dumps({"round": 1, "acc_weighted": 0.5}) + "\n")
    summary = {"best": {"round": 1}, "final": {"round": 1, "acc_weighted": 0.5,
               "perplexity": 10.0}, "selected_on": "test"}  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))
    with open(folder / "clients.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["client", "round", "accuracy", "loss", "perplexity", "loss_sd", "n"])
        for c, (mean, spread, k) in enumerate(zip(loss, sd, n, strict=True)):
            writer.writerow([c, 1, 0.5, mean, math.exp(mean), spread, k])
    return folder


def test_clients_hurt_on_perplexity_with_the_token_band_by_hand(tmp_path) -> None:
    n = [400, 400, 100]
    ref = write_lm_run(tmp_path / "ref", "fedavg", 0, [3.0, 3.0, 3.0], [2.0, 2.0, 2.0], n)
    run = write_lm_run(tmp_path / "run", "ditto", 0, [2.6, 3.1, 2.8], [1.0, 2.0, 2.0], n)
    hurt = clients_hurt_on_metric(load_run(run), load_run(ref))
    # noise = 1.96 sqrt((sd_a^2 + sd_r^2) / n):
    #   client 0: gain 3.0 - 2.6 = +0.4 vs 1.96 sqrt(5 / 400) = 0.2191 -> better
    #   client 1: gain -0.1 vs 1.96 sqrt(8 / 400) = 0.2772 -> within noise
    #   client 2: gain +0.2 vs 1.96 sqrt(8 / 100) = 0.5544 -> within noise
    assert hurt.metric == "perplexity"
    assert list(hurt.differences) == pytest.approx([0.4, -0.1, 0.2])
    assert hurt.noise[0] == pytest.approx(1.96 * math.sqrt(5 / 400))
    assert (hurt.better, hurt.worse) == pytest.approx((1 / 3, 0.0))
    assert hurt.worst_loss == pytest.approx(0.1)
    methods = load_methods([tmp_path])
    assert versus(methods[1], methods[0])["metric"] == "perplexity"
    table = client_table_markdown(methods)
    assert "test perplexity" in table and "| en-0 |" in table
    assert f"| en-0 | {math.exp(3.0):.2f} | {math.exp(2.6):.2f} |" in table  # ref, then run
    out = write_comparison(methods, ["fedavg"], tmp_path / "out")[0].read_text()
    assert "## Per client" in out and "judged on perplexity instead" in out


def test_runs_without_a_loss_spread_are_judged_on_accuracy(tmp_path) -> None:
    run = write_lm_run(tmp_path / "a", "x", 0, [3.0], [1.0], [10])
    rows = (run / "clients.csv").read_text().splitlines()
    (run / "clients.csv").write_text("\n".join(r.rsplit(",", 2)[0] + "," + r.rsplit(",", 1)[1]
                                               for r in rows) + "\n")  # fmt: skip
    assert "loss_sd" not in load_run(run).clients
    assert judged_on(load_run(run)) == "accuracy"
    assert clients_hurt_on_metric(load_run(run), load_run(run)).metric == "accuracy"
