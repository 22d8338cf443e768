"""Ctrl-C at a safe point: a round's bookkeeping is never half done when a run stops.

While a round's results are committed (client states stored, the aggregate applied, the
record logged, a checkpoint written) a SIGINT is held back and raised right after, so the
state a stopped run checkpoints is exactly the last completed round's.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Interruption:
    """Where a Ctrl-C stopped a run: rounds completed and the checkpoint to resume from."""

    rounds_done: int
    checkpoint: Path | None


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold SIGINT inside the block and raise KeyboardInterrupt when it ends.

    Only the main thread can install signal handlers; elsewhere the block runs unguarded.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[Any] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt
