"""The gain against a reference on the table's own metric, over clients and seeds (issue 60):
per client averaged over the paired seeds, then a 95 % t interval and a paired t test over
the clients, checked against a hand computation; and the one pairing of two runs' clients
behind both clients-hurt checks (accuracy and perplexity)."""

from __future__ import annotations

import math

import pytest

from fedsim.errors import ConfigError
from fedsim.search.compare import client_difference, load_methods, versus
from fedsim.search.compare_table import write_comparison
from fedsim.search.stats import mean_difference
from fedsim.tracking.clients_hurt import paired_clients
from fedsim.tracking.hurt_metric import clients_hurt_on_metric
from fedsim.tracking.run_data import load_run
from tests.test_select_on import write_lm_run

T_2 = 0.95 * math.sqrt(2 / (1 - 0.95**2))  # Student t, 2 degrees of freedom: 0.975 quantile


def test_mean_difference_by_hand() -> None:
    d = mean_difference([0.3, 0.0, 0.3])  # mean 0.2, sd sqrt(0.03), se 0.1, t = 2
    assert d["n"] == 3 and d["mean"] == pytest.approx(0.2)
    assert (d["lo"], d["hi"]) == pytest.approx((0.2 - T_2 * 0.1, 0.2 + T_2 * 0.1))
    # two-sided p of t = 2 with 2 degrees of freedom: 1 - 2 / sqrt(2 + 4)
    assert d["p"] == pytest.approx(1 - 2 / math.sqrt(6))
    same = mean_difference([0.1, 0.1])
    assert same["mean"] == pytest.approx(0.1) and math.isnan(same["p"])
    assert math.isnan(mean_difference([0.1])["lo"]) and math.isnan(mean_difference([])["mean"])


def _runs(tmp_path) -> list:
    n = [400, 400, 100]
    for seed, run_loss in ((0, [2.6, 3.1, 2.8]), (1, [2.8, 2.9, 2.6])):
        write_lm_run(tmp_path / f"ref{seed}", "fedavg", seed, [3.0] * 3, [2.0] * 3, n)
        write_lm_run(tmp_path / f"run{seed}", "ditto", seed, run_loss, [1.0] * 3, n)
    return load_methods([tmp_path])


def test_gain_over_clients_and_seeds_by_hand(tmp_path) -> None:
    ref, ditto = sorted(_runs(tmp_path), key=lambda m: m.label != "fedavg")
    # gains (fedavg's loss minus ditto's): seed 0 [0.4, -0.1, 0.2], seed 1 [0.2, 0.1, 0.4]
    # -> per client over the seeds [0.3, 0.0, 0.3]: mean 0.2, se 0.1, t = 2 (2 df)
    hurt = [clients_hurt_on_metric(ditto.runs[s], ref.runs[s]) for s in (0, 1)]
    gain = client_difference(hurt)
    assert (gain["clients"], gain["seeds"]) == (3, 2)
    assert gain["mean"] == pytest.approx(0.2)
    assert (gain["lo"], gain["hi"]) == pytest.approx((0.2 - T_2 * 0.1, 0.2 + T_2 * 0.1))
    assert gain["p"] == pytest.approx(1 - 2 / math.sqrt(6))
    assert versus(ditto, ref)["gain"] == pytest.approx(gain)
    text = write_comparison([ref, ditto], ["fedavg"], tmp_path / "out")[0].read_text()
    assert "paired t over clients x seeds" in text
    assert f"+0.200 [{0.2 - T_2 * 0.1:+.3f}, {0.2 + T_2 * 0.1:+.3f}] p=0.184" in text
    assert f"(ppl x{math.exp(-0.2):.3f})" in text


def test_one_pairing_of_clients_for_both_metrics(tmp_path) -> None:
    a = load_run(write_lm_run(tmp_path / "a", "x", 0, [2.0, 3.0], [1.0, 1.0], [10, 20]))
    b = load_run(write_lm_run(tmp_path / "b", "y", 0, [2.5, 2.0], [1.0, 1.0], [10, 20]))
    paired = paired_clients(a, b, ("loss", "accuracy"))
    assert paired.clients == [0, 1] and list(paired.column(-1)) == [10, 20]
    assert list(paired.column(0, reference=True)) == [2.5, 2.0]
    c = load_run(write_lm_run(tmp_path / "c", "z", 0, [2.0, 3.0], [1.0, 1.0], [10, 21]))
    with pytest.raises(ConfigError, match="client 1 has 21 test samples there and 20"):
        paired_clients(a, c, ("loss",))


def test_reproduce_refuses_a_max_concurrent_below_one() -> None:
    from ray_jobs.reproduce import reproduce

    with pytest.raises(ConfigError, match="--max-concurrent"):
        reproduce(["configs/debian/lm-fedavg.yaml"], [0], [], max_concurrent=0)
