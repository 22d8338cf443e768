"""Ctrl-C and SIGTERM at a safe point: a round's bookkeeping is never half done when a run
stops.

``stop_signals()`` is held around a run: SIGTERM (a cluster scheduler's preemption, ``kill``)
stops the run like Ctrl-C does, as ``Terminated`` (a KeyboardInterrupt). While a round's
results are committed (client states stored, the aggregate applied, the record logged, a
checkpoint written) both signals are held back and raised right after
(``deferred_interrupt``), so the state a stopped run checkpoints is exactly the last
completed round's.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HELD = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """The run received SIGTERM; it stops like Ctrl-C (exit code 143 from the CLI)."""


class Stopped(KeyboardInterrupt):
    """A sink ended the run on purpose while a round was logged (Ray Tune ended the trial:
    its scheduler stopped it, or the search itself stopped): the run stops as after Ctrl-C,
    with ``status: stopped`` in its summary."""


@dataclass(frozen=True)
class Interruption:
    """Where a Ctrl-C, SIGTERM or a sink stopped a run: rounds completed, the checkpoint to
    resume from, and why (``SIGINT`` / ``SIGTERM`` / ``stopped``: ``Stopped``)."""

    rounds_done: int
    checkpoint: Path | None
    signal: str = "SIGINT"


def _handler(previous: Any) -> Any:
    """A handler ``signal.signal`` accepts back: one installed outside Python (None) -> default."""
    return signal.SIG_DFL if previous is None else previous


_received: list[int] = []  # the last signal that stopped a run (Ray re-raises a plain
# KeyboardInterrupt from inside ray.get, losing Terminated's type)


def _raise_for(signum: int) -> None:
    _received[:] = [signum]
    if signum == signal.SIGTERM:
        raise Terminated
    raise KeyboardInterrupt


def stop_reason(stop: BaseException) -> str:
    """``SIGTERM``, ``stopped`` (a sink's ``Stopped``) or ``SIGINT``: what stopped the run
    with ``stop``. Ray turns our ``Terminated`` into a plain KeyboardInterrupt from inside
    ``ray.get``, so the handler's record of the signal decides where the type cannot."""
    received, _received[:] = list(_received), []
    if isinstance(stop, Terminated) or received == [signal.SIGTERM]:
        return "SIGTERM"
    return "stopped" if isinstance(stop, Stopped) else "SIGINT"


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` inside the block (SIGINT raises KeyboardInterrupt as it
    always does). Installed after Ray started, it replaces Ray's own SIGTERM handler (which
    aborts the driver). Only the main thread can install handlers; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: _raise_for(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, _handler(previous))


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold SIGINT and SIGTERM inside the block and raise the first one when it ends.

    Only the main thread can install signal handlers; elsewhere the block runs unguarded.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[Any] = []
    previous = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in HELD}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, _handler(handler))
    if received:
        _raise_for(received[0])
