"""Staleness discounts, FedBuff weights and the seeded virtual clock, checked by hand."""

import pickle

import numpy as np
import pytest

from fedsim.config.system import SpeedSpec, parse_speeds
from fedsim.rounds.clock.staleness import (
    buffered_weights,
    default_max_staleness,
    discount,
    fedasync_alpha,
    staleness_weights,
)
from fedsim.rounds.clock.virtual import VirtualClock, draw_slowdowns


def test_fedasync_discounts_by_hand():
    s = [0, 1, 3, 8]
    assert discount(s, "constant").tolist() == [1, 1, 1, 1]
    assert discount(s, "polynomial", a=0.5) == pytest.approx([1, 2**-0.5, 0.5, 1 / 3])
    assert discount(s, "polynomial", a=1.0) == pytest.approx([1, 1 / 2, 1 / 4, 1 / 9])
    # hinge a=2, b=2: 1 up to 2, then 1 / (2 (s - 2) + 1)
    assert discount(s, "hinge", a=2.0, b=2.0) == pytest.approx([1, 1, 1 / 3, 1 / 13])
    with pytest.raises(ValueError, match="allowed: constant, polynomial, hinge"):
        discount(s, "exponential")
    with pytest.raises(ValueError, match="staleness"):
        discount([-1], "constant")


def test_max_staleness_discount_keeps_and_drop_removes():
    s = [0.0, 1.5, 2.0, 3.0]
    kept = staleness_weights(s, kind="polynomial", a=1.0, max_staleness=2.0)
    assert kept == pytest.approx([1, 0.4, 1 / 3, 0.25])
    dropped = staleness_weights(s, kind="polynomial", a=1.0, max_staleness=2.0, policy="drop")
    assert dropped == pytest.approx([1, 0.4, 1 / 3, 0])
    # the seed's rule: hinge at b = max_staleness: full weight up to 2 tau, decaying beyond
    hinge = staleness_weights(s, kind="hinge", a=1.0, max_staleness=2.0)
    assert hinge == pytest.approx([1, 1, 1, 0.5])
    with pytest.raises(ValueError, match="allowed: discount, drop"):
        staleness_weights(s, policy="ignore")
    with pytest.raises(ValueError, match="hinge"):
        staleness_weights(s, kind="hinge")


def test_fedasync_alpha():
    assert fedasync_alpha(0.6, 3, kind="polynomial", a=0.5) == pytest.approx(0.3)
    assert fedasync_alpha(0.6, 3, kind="polynomial", max_staleness=2, policy="drop") == 0.0
    with pytest.raises(ValueError, match="alpha"):
        fedasync_alpha(0.0, 1)


def test_fedbuff_weights_by_hand():
    # K = 4, FedBuff's 1/sqrt(1+s): s = 0, 3, 8, 0 -> 1, 1/2, 1/3, 1 over K
    weights = buffered_weights([0, 3, 8, 0])
    assert weights == pytest.approx([0.25, 0.125, 1 / 12, 0.25])
    # sample-weighted: n = 1, 1, 2, 4 (sum 8)
    weights = buffered_weights([0, 3, 8, 0], [1, 1, 2, 4])
    assert weights == pytest.approx([1 / 8, 1 / 16, 2 / 24, 4 / 8])
    # drop the s = 8 update: it leaves the denominator (K = 3)
    weights = buffered_weights([0, 3, 8, 0], max_staleness=4, policy="drop")
    assert weights == pytest.approx([1 / 3, 1 / 6, 0, 1 / 3])
    normalized = buffered_weights([0, 3], normalize=True)
    assert normalized == pytest.approx([2 / 3, 1 / 3])
    assert buffered_weights([9, 9], max_staleness=1, policy="drop").tolist() == [0, 0]


@pytest.mark.parametrize(
    "spec, parsed",
    [
        ("constant", SpeedSpec("constant")),
        ("lognormal:0,0.5", SpeedSpec("lognormal", (0.0, 0.5))),
        ("uniform:1,3", SpeedSpec("uniform", (1.0, 3.0))),
        (" slow_fraction: 0.3, 4 ", SpeedSpec("slow_fraction", (0.3, 4.0))),
    ],
)
def test_parse_speeds(spec, parsed):
    assert parse_speeds(spec) == parsed


@pytest.mark.parametrize(
    "spec, why",
    [
        ("gamma:1,2", "unknown distribution"),
        ("uniform:1", "takes 2 parameters"),
        ("uniform:3,1", "LOW <= HIGH"),
        ("lognormal:0,x", "numbers"),
        ("lognormal:0,-1", "SIGMA"),
        ("slow_fraction:1.5,4", "FRACTION"),
        ("slow_fraction:0.3,0.5", "FACTOR"),
        ("constant:2", "takes 0 parameters"),
    ],
)
def test_parse_errors_are_one_line_and_name_spec_and_allowed(spec, why):
    with pytest.raises(ValueError, match=why) as error:
        parse_speeds(spec)
    message = str(error.value)
    assert "\n" not in message and repr(spec) in message and "system.speeds" in message
    assert "allowed: constant | lognormal" in message


def test_slowdowns_are_seeded_and_follow_the_spec():
    slow = draw_slowdowns("slow_fraction:0.3,4", 10, seed=(0, 1))
    assert sorted(slow.tolist()) == [1.0] * 7 + [4.0] * 3
    assert np.array_equal(slow, draw_slowdowns("slow_fraction:0.3,4", 10, seed=(0, 1)))
    uniform = draw_slowdowns("uniform:1,3", 1000, seed=(2,))
    assert uniform.min() >= 1 and uniform.max() <= 3 and abs(uniform.mean() - 2) < 0.1
    lognormal = draw_slowdowns("lognormal:0,0.5", 20000, seed=(3,))
    assert abs(np.log(lognormal).std() - 0.5) < 0.01 and abs(np.median(lognormal) - 1) < 0.02
    assert draw_slowdowns("constant", 3, seed=(0,)).tolist() == [1, 1, 1]


def test_clock_durations_arrivals_and_dropouts():
    clock = VirtualClock(np.array([1.0, 2.0, 4.0]), dropout=0.0, seed=(1,))
    assert clock.durations([2, 0], [10, 10]).tolist() == [40, 10]
    assert clock.arrivals([0, 1, 2], 5, start=100.0, step=0).tolist() == [105, 110, 120]
    assert default_max_staleness([10, 40, 20, np.inf]) == 40.0  # 2 x median(10, 20, 40)


def test_dropouts_are_seeded_by_step_and_client_not_by_cohort():
    clock = VirtualClock.from_spec("constant", 2000, seed=(4,), dropout=0.25)
    everyone = clock.dropped(range(2000), step=3)
    assert abs(everyone.mean() - 0.25) < 0.03
    assert np.array_equal(clock.dropped([5, 17], step=3), everyone[[5, 17]])
    assert not np.array_equal(clock.dropped(range(2000), step=4), everyone)
    times = clock.arrivals(range(2000), 1.0, start=0.0, step=3)
    assert np.array_equal(np.isinf(times), everyone)
    copy = pickle.loads(pickle.dumps(clock))
    assert np.array_equal(copy.dropped(range(2000), step=3), everyone)
    with pytest.raises(ValueError, match="dropout"):
        VirtualClock(np.ones(2), dropout=1.0)
