"""The base of every algorithm's keys (``algorithm.<key>``): a dataclass per algorithm."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AlgorithmParams:
    """Algorithm-specific config keys (``algorithm.<key>``); subclasses add fields."""
