"""The base of every algorithm's keys (``algorithm.<key>``): a dataclass per algorithm."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AlgorithmParams:
    """Algorithm-specific config keys (``algorithm.<key>``); subclasses add fields."""


def is_count(value: object) -> bool:
    """An integer >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_positive_count(value: object) -> bool:
    """An integer >= 1 (not a bool)."""
    return is_count(value) and value >= 1  # type: ignore[operator]
