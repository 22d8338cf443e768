"""The virtual clock of synchronous rounds as deployed systems run them (pure, no torch).

A round is one or more *attempts*; an attempt at virtual time ``start``:

1. **Available clients**: always all; or each online with chance ``system.availability``
   (one seeded draw per client and attempt, the run's attempts counted); or those whose
   trace has them on at ``start`` (with none on, the attempt waits for the first to come on).
2. **Selection**: ``ceil(overcommit x K)`` of them (all, if fewer are available), drawn
   by the cohort stream; with every key at its default this is exactly the plain cohort.
3. **Dropout**: each selected client goes offline before reporting with chance
   ``system.dropout`` (one draw per client and attempt); it is noticed when its training
   would have ended and never uploads. A client whose availability trace turns it off
   before its upload ends is offline too, noticed when it goes off.
4. **Reports**: a client reports at ``start + download + compute + upload``: its download
   bytes over its download bandwidth, its samples x local epochs x seconds per sample, its
   upload bytes (what it actually sent: compression and personal parts count) over its
   upload bandwidth. Later than ``start + deadline`` is *late* (dropped, noticed at the
   deadline). The first K reports are *kept* (ties: lower client first); later ones are
   *surplus*.
5. **End**: when the K-th report arrives; with fewer, when every selected client has
   reported or been noticed gone, or at the deadline, whichever is first.

An attempt with fewer kept reports than ``min_clients`` is *short*: ``skip`` ends the round
without an aggregation, ``retry`` starts a new attempt at its end (at most ``MAX_ATTEMPTS``
a round, then the round is skipped). Only kept clients' updates reach the server; every
other client's state stays as it was. The clock's state (the time, the attempts made) is
part of a checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fedsim.rounds.clock.virtual import Network, VirtualClock, transfer_seconds
from fedsim.streams import AVAILABILITY_TAG, COHORT_TAG, SPEED_TAG

MAX_ATTEMPTS = 10  # retries of one round before it is skipped


def sample_cohort(
    seed: int, round_idx: int, candidates: Sequence[int], size: int, attempt: int = 0
) -> list[int]:
    """``size`` of ``candidates`` drawn by the cohort stream of (seed, round, attempt)."""
    words = [seed, round_idx, COHORT_TAG] + ([attempt] if attempt else [])
    rng = np.random.default_rng(words)
    picked = rng.choice(len(candidates), size=size, replace=False)
    return sorted(int(candidates[i]) for i in picked)


class Availability(Protocol):
    """Who is online: ``online(t, step)`` (bool per client at time t, in the run's
    ``step``-th attempt or dispatch), ``online_until(c, t)`` (when an online client goes
    off), ``next_online_of(c, t)`` / ``next_online(t)`` (the first time >= t that client c /
    anyone is on)."""

    def online(self, t: float, step: int) -> np.ndarray: ...

    def online_until(self, client: int, t: float) -> float: ...

    def next_online(self, t: float) -> float: ...

    def next_online_of(self, client: int, t: float) -> float: ...


class Untimed:
    """Availability without a timeline: whoever is online stays on for the round."""

    def online_until(self, client: int, t: float) -> float:
        return math.inf

    def next_online(self, t: float) -> float:
        return t

    def next_online_of(self, client: int, t: float) -> float:
        return t


@dataclass(frozen=True)
class AlwaysOnline(Untimed):
    num_clients: int

    def online(self, t: float, step: int) -> np.ndarray:
        return np.ones(self.num_clients, dtype=bool)


@dataclass(frozen=True)
class OnlineByChance(Untimed):
    """Each client online with chance ``p``, drawn afresh for every attempt (dispatch)."""

    num_clients: int
    p: float
    seed: int

    def online(self, t: float, step: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, SPEED_TAG, AVAILABILITY_TAG, step])
        return rng.random(self.num_clients) < self.p


@dataclass(frozen=True)
class OnlineByTrace:
    """On/off intervals per client: ``trace`` has one entry per client, in client order
    (an ``AvailabilityTrace`` already mapped onto the clients)."""

    trace: Any

    def online(self, t: float, step: int) -> np.ndarray:
        return np.asarray(self.trace.available_at(t), dtype=bool)

    def online_until(self, client: int, t: float) -> float:
        return float(self.trace.online_until(client, t))

    def next_online(self, t: float) -> float:
        return min(self.next_online_of(c, t) for c in range(len(self.trace.intervals)))

    def next_online_of(self, client: int, t: float) -> float:
        return float(self.trace.next_online(client, t))


@dataclass(frozen=True)
class Rules:
    """The round rules of ``system.*``: K, over-selection, deadline, short rounds."""

    cohort_size: int  # K
    overcommit: float = 1.0
    deadline: float | None = None
    min_clients: int = 1
    short_round: str = "skip"

    @property
    def selected_size(self) -> int:
        """ceil(overcommit x K), computed so that 1.3 x 10 is 13, not 14."""
        return math.ceil(round(self.overcommit * self.cohort_size, 9))


@dataclass
class Attempt:
    """An attempt before training: who was online, who was selected, who drops out."""

    round: int
    number: int  # within the round (0: the first)
    step: int  # attempts made by the run before this one (seeds the dropout draw)
    start: float
    available: list[int]
    selected: list[int]
    dropouts: list[int]

    @property
    def trains(self) -> list[int]:
        """The selected clients that do not drop out: they train and may report."""
        gone = set(self.dropouts)
        return [c for c in self.selected if c not in gone]


@dataclass
class Outcome:
    """An attempt after training: who reported in time, and when it ended."""

    attempt: Attempt
    kept: list[int]
    late: list[int] = field(default_factory=list)
    surplus: list[int] = field(default_factory=list)
    offline: list[int] = field(default_factory=list)  # their trace turned them off mid-round
    end: float = 0.0
    short: bool = False

    def summary(self) -> dict[str, Any]:
        """The attempt's counts as metrics.jsonl keys."""
        a = self.attempt
        return {
            "available": len(a.available),
            "selected": len(a.selected),
            "reported": len(self.kept),
            "late": len(self.late),
            "dropouts": len(a.dropouts) + len(self.offline),
            "surplus": len(self.surplus),
        }  # round_time: the round's, over its attempts (rounds/local.py)


class SyncClock:
    """The clock and participation of a synchronous run (see the module docstring)."""

    def __init__(
        self,
        clock: VirtualClock,
        compute: np.ndarray,
        network: Network,
        availability: Availability,
        rules: Rules,
        seed: int,
    ):
        """``clock``: the dropout draws; ``compute``: each client's round of training, in
        virtual seconds."""
        self.clock, self.network, self.availability = clock, network, availability
        self.compute = np.asarray(compute, dtype=np.float64)
        self.rules, self.seed = rules, seed
        self.time = 0.0  # when the next round starts
        self.step = 0  # attempts made so far

    def state_dict(self) -> dict[str, Any]:
        return {"time": self.time, "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.time, self.step = float(state["time"]), int(state["step"])

    def select(self, round_idx: int, number: int, start: float, step: int) -> Attempt:
        """Attempt ``number`` of round ``round_idx`` at ``start`` (waiting for the first
        client a trace brings online, if none is)."""
        online = self.availability.online(start, step)
        if not online.any():  # wait for the first to come on; never again (a trace that
            later = self.availability.next_online(start)  # ended): nobody, a short round
            if start < later < math.inf:  # as with system.availability near 0
                return self.select(round_idx, number, later, step)
        available = [int(c) for c in np.flatnonzero(online)]
        size = min(self.rules.selected_size, len(available))
        selected = sample_cohort(self.seed, round_idx, available, size, number) if size else []
        gone = self.clock.dropped(selected, step) if selected else np.zeros(0, bool)
        dropouts = [c for c, out in zip(selected, gone, strict=True) if out]
        return Attempt(round_idx, number, step, start, available, selected, dropouts)

    def plain_attempt(self, round_idx: int, cohort: list[int], start: float, step: int) -> Attempt:
        """The plain cohort as an attempt (a clock that leaves nobody out only times it)."""
        return Attempt(round_idx, 0, step, start, list(range(len(self.compute))), cohort, [])

    def report_time(self, client: int, download: float, upload: float) -> float:
        """Seconds from the attempt's start to ``client``'s report."""
        n = self.network
        return (
            float(transfer_seconds(download, n.download[client]))
            + float(self.compute[client])
            + float(transfer_seconds(upload, n.upload[client]))
        )

    def settle(
        self, attempt: Attempt, downloads: dict[int, int], uploads: dict[int, int]
    ) -> Outcome:
        """Who of ``attempt`` reports in time, given the bytes each client received and sent."""
        rules, start = self.rules, attempt.start
        deadline = math.inf if rules.deadline is None else start + rules.deadline
        noticed: list[float] = []  # when the server learns each non-surplus client's fate
        for c in attempt.dropouts:  # gone mid-training: noticed when it would have finished
            down = float(transfer_seconds(downloads.get(c, 0), self.network.download[c]))
            noticed.append(start + down + float(self.compute[c]))
        reports, late, offline = [], [], []
        for c in attempt.trains:
            at = start + self.report_time(c, downloads.get(c, 0), uploads.get(c, 0))
            off = self.availability.online_until(c, start)
            if off < at:
                offline.append(c)
                noticed.append(off)
            elif at > deadline:
                late.append(c)
                noticed.append(deadline)
            else:
                reports.append((at, c))
        reports.sort()
        kept = sorted(c for _, c in reports[: rules.cohort_size])
        surplus = sorted(c for _, c in reports[rules.cohort_size :])
        if len(kept) == rules.cohort_size:
            end = reports[rules.cohort_size - 1][0]
        else:
            end = min(max([at for at, _ in reports] + noticed, default=start), deadline)
        short = len(kept) < rules.min_clients
        return Outcome(attempt, kept, sorted(late), surplus, sorted(offline), end, short)

    def retries(self, outcome: Outcome) -> bool:
        """Whether a short ``outcome`` is followed by another attempt in the same round."""
        return (
            outcome.short
            and self.rules.short_round == "retry"
            and outcome.attempt.number + 1 < MAX_ATTEMPTS
        )
