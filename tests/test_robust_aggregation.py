"""Robust rules and the anomaly filter on tiny hand-made updates (every number by hand).

The rules (fedsim/deployment/robust.py) and the server stage that feeds their results to an
algorithm as ordinary weighted sums (fedsim/deployment/stages/robust.py, stages/noise.py).
"""

from __future__ import annotations

import pytest
import torch

from fedsim.config import AggregationConfig
from fedsim.deployment import robust
from fedsim.deployment.stages.noise import add_central_noise
from fedsim.deployment.stages.robust import robust_sums


def rows(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_coordinate_median_odd_and_even():
    assert robust.coordinate_median(rows([1, 10], [3, 30], [2, 20])).tolist() == [2, 20]
    # even n: the mean of the two middle values; column 1 sorted is -5, 10, 20, 30
    got = robust.coordinate_median(rows([1, 10], [2, 20], [3, 30], [100, -5]))
    assert got.tolist() == [2.5, 15.0]


def test_trimmed_mean_cuts_floor_beta_n_from_each_end():
    five = rows([1], [2], [3], [4], [100])
    assert robust.trimmed_mean(five, 0.2).tolist() == [3.0]  # cut 1 each side: (2+3+4)/3
    assert robust.trimmed_mean(five, 0.1).tolist() == [22.0]  # floor(0.5) = 0: plain mean
    four = rows([1, 10], [2, 20], [3, 30], [100, -5])
    assert robust.trimmed_mean(four, 0.25).tolist() == [2.5, 15.0]


def test_krum_scores_and_selection():
    # 1-D points 0, 1, 2, 10, 11; f = 1 -> each scored on its n - f - 2 = 2 nearest others
    points = rows([0], [1], [2], [10], [11])
    # 0: 1 + 4; 1: 1 + 1; 2: 1 + 4; 10: 1 + 64; 11: 1 + 81
    assert robust.krum_scores(points, 1).tolist() == [5, 2, 5, 65, 82]
    assert robust.krum_select(points, 1) == [1]
    assert robust.krum_select(points, 1, m=3) == [0, 1, 2]


def test_bulyan_selects_by_repeated_krum_then_averages_near_the_median():
    # f = 1, n = 7 = 4f + 3; theta = n - 2f = 5 picks: 2, then 1 (tie with 3: lower index),
    # then 3, then 0 (tie with 4), then 4: the two outliers are never picked
    points = rows([0], [1], [2], [3], [4], [50], [-40])
    assert robust.bulyan_select(points, 1) == [0, 1, 2, 3, 4]
    # beta = theta - 2f = 3 values closest to the median: median 5 of 0,1,5,6,7 -> 5,6,7
    assert robust.closest_to_median_mean(rows([0], [1], [5], [6], [7]), 3).tolist() == [6.0]
    # median 2 of 0,1,2,3,10 -> 2, then 1 and 3 (equal distance, both taken) -> mean 2
    assert robust.closest_to_median_mean(rows([0], [1], [2], [3], [10]), 3).tolist() == [2.0]


def test_anomaly_filter_drops_updates_pointing_away_from_the_median():
    updates = rows([1, 1], [1, 0.9], [0.9, 1], [-1, -1])
    # median of every column: (0.9 + 1) / 2 = 0.95 -> cosines ~1, ~1, ~1, -1
    cosines = robust.cosine_to_median(updates)
    assert cosines[3].item() == pytest.approx(-1.0)
    assert robust.anomaly_keep(updates, 0.5) == [0, 1, 2]
    assert robust.cosine_to_median(rows([0, 0], [1, 1], [1, 1]))[0].item() == 0.0


# ------------------------------------------------------------------ the server stage


def sums_of(values: dict[int, list[float]], weights: dict[int, float]) -> dict:
    """Client c uploads ``params`` = values[c] with weight weights[c] and a control sum."""
    return {
        c: {
            "params": (weights[c], torch.tensor(v, dtype=torch.float32)),
            "dc": (1.0, torch.tensor([float(c)])),
        }
        for c, v in values.items()
    }


def test_median_reaches_the_algorithm_as_a_weighted_sum_whose_mean_is_the_median():
    values = {0: [1.0, 10.0], 1: [2.0, 20.0], 2: [3.0, 30.0], 3: [100.0, -5.0]}
    weights = {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0}
    out = robust_sums(AggregationConfig(rule="median"), sums_of(values, weights), {}, ("params",))
    total = out.sums["params"]
    assert total.weight == 10.0
    assert total.mean().tolist() == [2.5, 15.0]
    assert out.sums["dc"].value.tolist() == [6.0]  # not a model sum: plain sum 0+1+2+3


def test_trimmed_mean_and_mean_rules_on_the_server():
    values = {0: [1.0], 1: [2.0], 2: [3.0], 3: [4.0], 4: [100.0]}
    weights = dict.fromkeys(values, 1.0)
    config = AggregationConfig(rule="trimmed_mean", trim=0.2)
    out = robust_sums(config, sums_of(values, weights), {}, ("params",))
    assert out.sums["params"].mean().tolist() == [3.0]
    weights[4] = 5.0  # mean rule: the algorithm's own weights
    out = robust_sums(AggregationConfig(), sums_of(values, weights), {}, ("params",))
    assert out.sums["params"].mean().item() == pytest.approx((1 + 2 + 3 + 4 + 500) / 9)


def test_krum_and_multikrum_average_the_chosen_clients_with_their_weights():
    values = {c: [float(x)] for c, x in enumerate([0, 1, 2, 10, 11])}
    deltas = {c: torch.tensor(v) for c, v in values.items()}
    weights = {0: 1.0, 1: 1.0, 2: 3.0, 3: 1.0, 4: 1.0}
    out = robust_sums(
        AggregationConfig(rule="krum", krum_f=1), sums_of(values, weights), deltas, ("params",)
    )
    assert out.selected == [1] and out.sums["params"].mean().tolist() == [1.0]
    assert out.sums["dc"].value.tolist() == [10.0]  # every client that passed the filter
    config = AggregationConfig(rule="multikrum", krum_f=1, krum_m=3)
    out = robust_sums(config, sums_of(values, weights), deltas, ("params",))
    assert out.selected == [0, 1, 2]
    assert out.sums["params"].mean().item() == pytest.approx((0 + 1 + 3 * 2) / 5)


def test_krum_after_a_filter_that_kept_no_one_records_an_empty_pick():
    """Opposed updates: the anomaly filter (cosine to the median >= 0.99) drops them all;
    krum then picks no one, recorded as [] (not left out of the round's metrics)."""
    values = {0: [1.0, 0.0], 1: [-1.0, 0.0], 2: [0.0, 1.0], 3: [0.0, -1.0]}
    deltas = {c: torch.tensor(v) for c, v in values.items()}
    config = AggregationConfig(rule="krum", krum_f=0, anomaly_cosine=0.99)
    out = robust_sums(config, sums_of(values, dict.fromkeys(values, 1.0)), deltas, ("params",))
    assert out.dropped == [0, 1, 2, 3] and out.selected == []
    assert "params" not in out.sums  # no model update: the server keeps its model


def test_bulyan_on_the_server():
    values = {c: [float(x)] for c, x in enumerate([0, 1, 2, 3, 4, 50, -40])}
    deltas = {c: torch.tensor(v) for c, v in values.items()}
    config = AggregationConfig(rule="bulyan", krum_f=1)
    out = robust_sums(config, sums_of(values, dict.fromkeys(values, 1.0)), deltas, ("params",))
    assert out.selected == [0, 1, 2, 3, 4]
    assert out.sums["params"].mean().tolist() == [2.0]  # 1, 2, 3 around the median 2


def test_anomaly_filter_drops_every_sum_of_a_dropped_client():
    values = {0: [1.0, 1.0], 1: [1.0, 0.9], 2: [0.9, 1.0], 3: [-1.0, -1.0]}
    deltas = {c: torch.tensor(v) for c, v in values.items()}
    config = AggregationConfig(anomaly_cosine=0.5)
    out = robust_sums(config, sums_of(values, dict.fromkeys(values, 1.0)), deltas, ("params",))
    assert out.dropped == [3]
    assert out.sums["params"].mean().tolist() == pytest.approx([2.9 / 3, 2.9 / 3])
    assert out.sums["dc"].value.tolist() == [3.0]  # 0 + 1 + 2: client 3 is gone entirely


def test_central_noise_is_one_seeded_draw_scaled_by_the_largest_weight():
    from fedsim.algorithms.base import WeightedSum

    def fresh() -> dict:
        total = WeightedSum()
        total.add(2.0, torch.zeros(20000))
        total.add(4.0, torch.zeros(20000))
        return {"params": total, "dc": WeightedSum(1.0, torch.zeros(3, dtype=torch.float64))}

    sums = fresh()
    add_central_noise(sums, ("params",), {"params": 4.0}, 0.5, seed=0, round_idx=3)
    noise = sums["params"].value
    assert noise.std().item() == pytest.approx(0.5 * 4.0, rel=0.03)  # z C * max weight
    assert sums["dc"].value.abs().sum().item() == 0.0  # not a model sum
    again = fresh()
    add_central_noise(again, ("params",), {"params": 4.0}, 0.5, seed=0, round_idx=3)
    assert torch.equal(again["params"].value, noise)
    other = fresh()
    add_central_noise(other, ("params",), {"params": 4.0}, 0.5, seed=0, round_idx=4)
    assert not torch.equal(other["params"].value, noise)
