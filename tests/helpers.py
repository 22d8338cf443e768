"""Small helpers shared by test modules."""

from __future__ import annotations

TIMING_KEYS = ("seconds", "train_seconds_max_worker")  # wall-clock: differ run to run


def untimed(history: list[dict]) -> list[dict]:
    """Round summaries without their wall-clock keys, for comparing two runs."""
    return [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in history]
