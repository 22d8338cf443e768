"""The base of every algorithm's keys (``algorithm.<key>``): a dataclass per algorithm."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

# the ``algorithm.name`` whose keys are being checked (a user's subclass, not its parent)
_CONFIGURING: ContextVar[str | None] = ContextVar("fedsim_configuring_algorithm", default=None)


@contextmanager
def configuring(name: str) -> Iterator[None]:
    """While checking ``algorithm.name=name``'s keys: their errors name ``name``."""
    token = _CONFIGURING.set(name)
    try:
        yield
    finally:
        _CONFIGURING.reset(token)


def configured_name(default: str) -> str:
    """The algorithm whose keys are being checked (``configuring``), else ``default``: an
    error raised by FedProx's keys for ``my_algos:DecayProx`` names DecayProx's path."""
    return _CONFIGURING.get() or default


@dataclass
class AlgorithmParams:
    """Algorithm-specific config keys (``algorithm.<key>``); subclasses add fields."""


def is_count(value: object) -> bool:
    """An integer >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_positive_count(value: object) -> bool:
    """An integer >= 1 (not a bool)."""
    return is_count(value) and value >= 1  # type: ignore[operator]
