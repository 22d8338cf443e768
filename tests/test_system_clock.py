"""The synchronous clock's rules against hand-computed schedules on a handful of clients:
who is sampled, who is kept, the round's time, who dropped (fedsim/rounds/clock/sync.py)."""

from __future__ import annotations

import math

import numpy as np

from fedsim.rounds.clock.sync import (
    MAX_ATTEMPTS,
    AlwaysOnline,
    Attempt,
    OnlineByChance,
    OnlineByTrace,
    Rules,
    SyncClock,
    sample_cohort,
)
from fedsim.rounds.clock.virtual import Network, VirtualClock, transfer_seconds
from fedsim.streams import COHORT_TAG, SPEED_TAG


def make_clock(compute, rules, *, dropout=0.0, up=None, down=None, online=None, seed=0):
    """A clock whose clients need ``compute`` virtual seconds a round (work 1 each)."""
    n = len(compute)
    per_sample = VirtualClock(np.asarray(compute, float), dropout, (seed, SPEED_TAG))
    network = Network(
        np.full(n, np.inf) if up is None else np.asarray(up, float),
        np.full(n, np.inf) if down is None else np.asarray(down, float),
    )
    compute = np.asarray(compute, float)
    return SyncClock(per_sample, compute, network, online or AlwaysOnline(n), rules, seed)


def attempt(selected, start=100.0, dropouts=(), n=5):
    return Attempt(0, 0, 0, start, list(range(n)), list(selected), list(dropouts))


def test_overselection_keeps_the_first_k_to_finish_and_ends_with_the_kth():
    clock = make_clock([10, 40, 20, 30, 50], Rules(cohort_size=2, overcommit=1.5))
    assert clock.rules.selected_size == 3  # ceil(1.5 x 2)
    out = clock.settle(attempt([0, 1, 3]), {}, {})
    # reports at 110, 140, 130: the first two are 0 and 3; client 1 is surplus
    assert (out.kept, out.surplus, out.late, out.end) == ([0, 3], [1], [], 130.0)
    assert out.summary() == {
        "available": 5, "selected": 3, "reported": 2, "late": 0, "dropouts": 0,
        "surplus": 1,
    }  # fmt: skip
    assert out.end - out.attempt.start == 30.0  # the round's time (rounds/local.py records it)


def test_a_report_is_download_plus_compute_plus_upload_of_the_bytes_sent():
    clock = make_clock([10, 20], Rules(2), up=[100, 50], down=[1000, math.inf])
    # client 0: 2000 B / 1000 B/s + 10 + 300 B / 100 B/s = 15; client 1: 0 + 20 + 100 / 50 = 22
    assert clock.report_time(0, 2000, 300) == 15.0
    assert clock.report_time(1, 2000, 100) == 22.0
    out = clock.settle(attempt([0, 1], n=2), {0: 2000, 1: 2000}, {0: 300, 1: 100})
    assert out.kept == [0, 1] and out.end == 122.0
    assert transfer_seconds(0, 0.5) == 0 and transfer_seconds(10, math.inf) == 0


def test_a_deadline_drops_late_clients_and_the_round_waits_until_it():
    clock = make_clock([10, 25, 40], Rules(3, deadline=30))
    out = clock.settle(attempt([0, 1, 2], n=3), {}, {})
    # 40 > 30: client 2 is late; with fewer than K reports the server waits to the deadline
    assert (out.kept, out.late, out.end, out.short) == ([0, 1], [2], 130.0, False)


def test_a_dropout_never_reports_and_is_noticed_when_its_training_would_end():
    rules = Rules(2)
    out = make_clock([10, 20, 50], rules).settle(attempt([0, 1, 2], dropouts=[2], n=3), {}, {})
    assert (out.kept, out.end) == ([0, 1], 120.0)  # K reports in: nobody waits for client 2
    out = make_clock([10, 20, 50], Rules(3)).settle(attempt([0, 1, 2], dropouts=[2], n=3), {}, {})
    assert (out.kept, out.end) == ([0, 1], 150.0)  # fewer than K: until client 2 is noticed
    assert out.summary()["dropouts"] == 1
    # its download counts toward when it is noticed
    slow_down = make_clock([10, 20, 50], Rules(3), down=[1, 1, 10])
    out = slow_down.settle(attempt([0, 1, 2], dropouts=[2], n=3), {2: 100}, {})
    assert out.end == 100 + 10 + 50


def test_a_short_round_is_skipped_or_retried_up_to_the_cap():
    compute = [10, 25, 40]
    skip = make_clock(compute, Rules(3, deadline=15, min_clients=2))
    out = skip.settle(attempt([0, 1, 2], n=3), {}, {})
    assert (out.kept, out.late, out.short) == ([0], [1, 2], True)
    assert not skip.retries(out)
    retry = make_clock(compute, Rules(3, deadline=15, min_clients=2, short_round="retry"))
    assert retry.retries(out)
    last = Attempt(0, MAX_ATTEMPTS - 1, 0, 0.0, [0, 1, 2], [0, 1, 2], [])
    assert not retry.retries(retry.settle(last, {}, {}))  # the cap: then the round is skipped


def test_all_online_and_no_overselection_sample_exactly_the_plain_cohort():
    clock = make_clock([1.0] * 10, Rules(4), seed=3)
    for r in range(5):
        plain = np.random.default_rng([3, r, COHORT_TAG]).choice(10, size=4, replace=False)
        assert clock.select(r, 0, 0.0, r).selected == sorted(plain.tolist())
    # a retry draws anew; over-selection draws ceil(overcommit K) from the same stream
    assert sample_cohort(3, 0, range(10), 4, attempt=1) != sample_cohort(3, 0, range(10), 4)
    assert Rules(10, overcommit=1.3).selected_size == 13


def test_dropouts_are_seeded_draws_per_attempt_at_the_configured_rate():
    clock = make_clock([1.0] * 20, Rules(20), dropout=0.3, seed=1)
    first = [clock.select(0, 0, 0.0, step).dropouts for step in range(200)]
    again = [clock.select(0, 0, 0.0, step).dropouts for step in range(200)]
    assert first == again
    rate = sum(map(len, first)) / (200 * 20)
    assert 0.27 < rate < 0.33
    expected = clock.clock.dropped(list(range(20)), 7)
    assert first[7] == [c for c in range(20) if expected[c]]


def test_availability_by_chance_samples_only_online_clients():
    online = OnlineByChance(10, 0.5, seed=2)
    clock = make_clock([1.0] * 10, Rules(3, overcommit=2), online=online, seed=2)
    for r in range(20):
        a = clock.select(r, 0, 0.0, r)
        up = np.flatnonzero(online.online(0.0, r)).tolist()
        assert a.available == up
        assert set(a.selected) <= set(up) and len(a.selected) == min(6, len(up))
    rate = np.mean([online.online(0.0, step).mean() for step in range(400)])
    assert 0.45 < rate < 0.55


class FakeTrace:
    """On intervals per client, not repeating (the trace reader's interface)."""

    def __init__(self, intervals):
        self.intervals = [np.asarray(i, float).reshape(-1, 2) for i in intervals]

    def available_at(self, t):
        return np.array([any(a <= t < b for a, b in iv) for iv in self.intervals])

    def online_until(self, c, t):
        return next(b for a, b in self.intervals[c] if a <= t < b)

    def next_online(self, c, t):
        return min((max(a, t) for a, b in self.intervals[c] if b > t), default=math.inf)


def test_a_trace_samples_who_is_on_and_a_client_going_off_mid_round_drops():
    trace = FakeTrace([[(0, 50)], [(0, 1000)], [(200, 300)]])
    clock = make_clock([60, 30, 10], Rules(2), online=OnlineByTrace(trace))
    a = clock.select(0, 0, 0.0, 0)
    assert (a.available, a.selected) == ([0, 1], [0, 1])  # client 2 comes on at 200
    out = clock.settle(a, {}, {})
    # client 0 needs 60 s but goes off at 50: offline, noticed then; client 1 reports at 30
    assert (out.kept, out.offline, out.end) == ([1], [0], 50.0)
    assert out.summary()["dropouts"] == 1
    # nobody on at 10: the attempt waits for the next to come on; never again (the trace
    # ended): nobody is available and the round is short, as with availability near 0
    waits = make_clock([1, 1], Rules(1), online=OnlineByTrace(FakeTrace([[(0, 5)], [(40, 90)]])))
    assert waits.select(0, 0, 10.0, 0).start == 40.0
    ended = waits.select(0, 0, 100.0, 0)
    assert (ended.start, ended.available, ended.selected) == (100.0, [], [])
    assert waits.settle(ended, {}, {}).short


def test_the_clock_state_round_trips():
    clock = make_clock([1.0, 2.0], Rules(1))
    clock.time, clock.step = 12.5, 4
    other = make_clock([1.0, 2.0], Rules(1))
    other.load_state_dict(clock.state_dict())
    assert (other.time, other.step) == (12.5, 4)
