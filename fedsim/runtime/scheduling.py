"""Split a round's tasks across workers so that every worker finishes at about the same time.

Greedy largest-first (LPT, Graham 1969): take tasks by decreasing cost and give each to the
currently least-loaded worker. The longest worker is within 4/3 of the optimum, and unlike
round robin it does not leave one worker with all the big clients of a skewed partition.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def assign_balanced(costs: Sequence[float], num_workers: int) -> list[list[int]]:
    """Task indices per worker, largest cost first to the least-loaded worker.

    Deterministic: ties in cost go by task index, ties in load by worker index. Each share
    is returned in increasing task order; a worker may get nothing when tasks are few.
    """
    if num_workers < 1:
        raise ValueError(f"num_workers={num_workers}: must be >= 1")
    if any(c < 0 for c in costs):
        raise ValueError("task costs must be >= 0")
    order = sorted(range(len(costs)), key=lambda i: (-costs[i], i))
    loads = [(0.0, w) for w in range(num_workers)]  # a heap of (load, worker)
    shares: list[list[int]] = [[] for _ in range(num_workers)]
    for task in order:
        load, worker = heapq.heappop(loads)
        shares[worker].append(task)
        heapq.heappush(loads, (load + float(costs[task]), worker))
    return [sorted(share) for share in shares]


def share_loads(costs: Sequence[float], shares: list[list[int]]) -> list[float]:
    """Total cost per worker of an assignment."""
    return [float(sum(costs[i] for i in share)) for share in shares]
