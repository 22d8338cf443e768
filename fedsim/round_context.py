"""A round as one frozen value: what the driver's algorithm and every client task of the round
receive as an argument (pfl-research's ``CentralContext``, Flower's ``FitIns`` config).

The run plan (``fedsim/run_plan.py``) resolves it once per round; nothing sets a round's value
on an object that outlives the round. A key given as a schedule is read from it, never from
the params an algorithm was built with (those are round 0's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RoundContext:
    """One round's resolved settings (picklable; every client task of the round carries it)."""

    round: int
    algorithm_params: Any  # the algorithm's params with this round's scheduled keys
    lr: float | None = None  # the lr every client steps with (None: the optimizer's own)
    lr_scale: float = 1.0  # its factor on the optimizer's own initial lr
    optimizer: dict[str, float] = field(default_factory=dict)  # scheduled momentum, weight_decay
    clip_grad_norm: float | None = None  # client.clip_grad_norm this round
    recorded: dict[str, float] = field(default_factory=dict)  # metrics.jsonl's entries


def static_context(round_idx: int, algorithm_params: Any) -> RoundContext:
    """A round with nothing scheduled: the params as built (a unit test's, a finished run's)."""
    return RoundContext(round_idx, algorithm_params)
