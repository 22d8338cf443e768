"""Largest-first balanced assignment of a round's tasks to workers."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.runtime.scheduling import assign_balanced, share_loads


def test_hand_computed_lpt_assignment():
    # 5 -> w0; 4 -> w1; 3 -> w1 (4 < 5); 3 -> w0 (5 < 7); 3 -> w1 (7 < 8)
    shares = assign_balanced([5, 4, 3, 3, 3], 2)
    assert shares == [[0, 3], [1, 2, 4]]
    assert share_loads([5, 4, 3, 3, 3], shares) == [8.0, 10.0]


def test_skewed_sizes_beat_round_robin():
    costs = [100, 90, 10, 10, 5, 5]  # round robin gives w0 = 100 + 10 + 5, w1 = 90 + 10 + 5
    shares = assign_balanced(costs, 2)
    assert max(share_loads(costs, shares)) == 110  # {100, 5, 5} / {90, 10, 10}
    round_robin = [list(range(0, 6, 2)), list(range(1, 6, 2))]
    assert max(share_loads(costs, round_robin)) == 115


def test_ties_are_deterministic_and_shares_sorted():
    assert assign_balanced([1, 1, 1, 1], 2) == [[0, 2], [1, 3]]
    assert assign_balanced([2, 7, 2, 7], 3) == [[1], [3], [0, 2]]


def test_more_workers_than_tasks_leaves_some_empty():
    assert assign_balanced([3, 1], 4) == [[0], [1], [], []]
    assert assign_balanced([], 3) == [[], [], []]


def test_bad_input():
    with pytest.raises(ValueError, match="num_workers"):
        assign_balanced([1], 0)
    with pytest.raises(ValueError, match=">= 0"):
        assign_balanced([1, -1], 2)


@settings(max_examples=60, deadline=None)
@given(
    costs=st.lists(st.integers(min_value=0, max_value=1000), max_size=40),
    workers=st.integers(min_value=1, max_value=6),
)
def test_every_task_once_and_list_scheduling_bound(costs, workers):
    shares = assign_balanced(costs, workers)
    assert len(shares) == workers
    assert sorted(i for share in shares for i in share) == list(range(len(costs)))
    loads = share_loads(costs, shares)
    # Greedy list scheduling: the longest worker is at most the mean load plus one task.
    assert max(loads) <= sum(costs) / workers + max(costs, default=0) + 1e-9


@settings(max_examples=40, deadline=None)
@given(
    costs=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=7),
    workers=st.integers(min_value=2, max_value=3),
)
def test_within_four_thirds_of_optimum(costs, workers):
    best = min(
        max(sum(c for c, w in zip(costs, pick, strict=True) if w == k) for k in range(workers))
        for pick in itertools.product(range(workers), repeat=len(costs))
    )
    assert max(share_loads(costs, assign_balanced(costs, workers))) <= 4 / 3 * best + 1e-9
