"""When clients of an asynchronous run leave and arrive, in virtual time (pure, no torch).

The buffered round kind (``fedsim/rounds/buffered.py``) asks it for each aggregation; its
``state_dict`` (the clients in flight, the buffer, the clock) is part of a checkpoint.

A client's round takes ``samples x seconds per sample`` of virtual time (samples: what it
trains on, ``fedsim.client_work.LocalWork.samples``; seconds per sample: ``system.speeds``).
The schedule does not depend on what clients compute, so it is fixed by the seed before any
training runs:

- ``concurrency`` C clients train at once. A free slot is filled at once with a client drawn
  uniformly (seeded by the dispatch number) from those neither training nor waiting in the
  buffer; it receives the server's current model version.
- Arrivals are taken in time order (ties: lower client id first). An arrival joins the
  buffer; the ``buffer_size``-th (K) arrival triggers an aggregation, which makes the next
  model version and frees the K clients. A client therefore trains at most once per version
  (never twice on the same model).
- A client that drops out (``system.dropout``, one seeded draw per dispatch) is noticed
  at the time it would have arrived; its slot is refilled and it sends nothing.
- With an availability model (``system.availability``: a seeded draw per dispatch;
  ``system.availability_trace``: on/off intervals) a slot is filled only with a client
  online at that moment; with none online (a trace) the slot waits for the first idle client
  to come on. A client whose trace turns it off before it arrives drops out, noticed then.

Synchronous rounds have their own clock, on the same time axis (``sync.py``).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsim.rounds.clock.virtual import VirtualClock
from fedsim.streams import DISPATCH_TAG

MAX_DRAWS = 100  # availability by chance: draws at one moment before the slot stays free


@dataclass(frozen=True)
class Flight:
    """One dispatch: a client training from model ``version`` from ``dispatched`` on."""

    client: int
    version: int
    dispatched: float
    arrives: float  # when its update reaches the server (or its dropout is noticed)
    step: int  # the dispatch's number (seeds its dropout draw)
    dropped_out: bool = False

    @property
    def delay(self) -> float:
        """How long the client was away: its round trip in virtual time."""
        return self.arrives - self.dispatched


@dataclass
class Aggregation:
    """The server's ``index``-th aggregation (it makes version ``index + 1``)."""

    index: int
    time: float  # the virtual time of the K-th arrival
    updates: list[Flight]  # the buffer, in arrival order
    dropouts: list[Flight] = field(default_factory=list)  # noticed since the previous one

    def staleness(self) -> np.ndarray:
        """s per update: the server versions made since the model it trained from."""
        return np.array([self.index - u.version for u in self.updates], dtype=np.float64)

    def delays(self) -> np.ndarray:
        return np.array([u.delay for u in self.updates], dtype=np.float64)


class AsyncSchedule:
    """The event order of an asynchronous run: call ``next_aggregation`` once per round."""

    def __init__(
        self,
        clock: VirtualClock,
        durations: Sequence[float] | np.ndarray,
        concurrency: int,
        buffer_size: int,
        seed: int,
        availability: Any = None,
    ):
        """``availability``: who is online when (``sync.Availability``; None: all,
        always)."""
        self.clock, self.availability = clock, availability
        self.durations = np.asarray(durations, dtype=np.float64)
        self.num_clients = len(self.durations)
        if not 1 <= buffer_size <= self.num_clients:
            raise ValueError(f"buffer_size={buffer_size}: must be in 1..{self.num_clients}")
        self.concurrency = min(concurrency, self.num_clients)
        self.buffer_size = buffer_size
        self.seed = seed
        self.time = 0.0  # of the newest model version
        self.version = 0
        self.step = 0
        self.in_flight: list[tuple[float, int, int, Flight]] = []  # heap by (arrival, client)
        self.buffer: list[Flight] = []
        self._fill()

    def flights(self) -> list[Flight]:
        """The clients in flight (not the wake-ups waiting for a client to come online)."""
        return [f for *_, f in self.in_flight if f is not None]

    def busy(self) -> set[int]:
        """Clients training or waiting in the buffer (not available for a dispatch)."""
        return {f.client for f in self.flights()} | {f.client for f in self.buffer}

    def pending_versions(self) -> set[int]:
        """Model versions some dispatched client still trains from or waits with."""
        return {f.version for f in self.flights()} | {f.version for f in self.buffer}

    def _online(self, idle: list[int], now: float) -> list[int]:
        """The idle clients online at ``now`` (all without an availability model); with
        none, a wake-up is queued for the first to come on (a trace), or the draw is made
        again at the next step (availability by chance, at most MAX_DRAWS times)."""
        if self.availability is None or not idle:
            return idle
        for _ in range(MAX_DRAWS):
            online = self.availability.online(now, self.step)
            ready = [c for c in idle if online[c]]
            if ready:
                return ready
            later = min(self.availability.next_online_of(c, now) for c in idle)
            if later > now:  # a trace: nobody idle is on now
                queued = any(e[3] is None and e[0] == later for e in self.in_flight)
                if np.isfinite(later) and not queued:
                    heapq.heappush(self.in_flight, (later, -1, self.step, None))
                return []
            self.step += 1  # by chance: nobody drawn online, draw again
        return []

    def _fill(self, now: float | None = None) -> None:
        now = self.time if now is None else now
        while len(self.flights()) < self.concurrency:
            busy = self.busy()
            idle = self._online([c for c in range(self.num_clients) if c not in busy], now)
            if not idle:
                return
            rng = np.random.default_rng([self.seed, DISPATCH_TAG, self.step])
            client = idle[int(rng.integers(len(idle)))]
            dropped = bool(self.clock.dropped([client], self.step)[0])
            arrives = now + float(self.durations[client])
            if self.availability is not None:  # goes offline before it reports: dropped
                off = self.availability.online_until(client, now)
                if off < arrives:
                    dropped, arrives = True, off
            flight = Flight(client, self.version, now, arrives, self.step, dropped)
            heapq.heappush(self.in_flight, (arrives, client, self.step, flight))
            self.step += 1

    def state_dict(self) -> dict[str, Any]:
        """Where the schedule stands, as plain numbers (a checkpoint holds it)."""
        return {
            "time": self.time,
            "version": self.version,
            "step": self.step,
            "in_flight": [
                dataclasses.astuple(f) for f in sorted(self.flights(), key=_flight_order)
            ],
            "buffer": [dataclasses.astuple(f) for f in self.buffer],
            "wakes": [(t, step) for t, _, step, f in self.in_flight if f is None],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict()``: the same arrivals and dispatches follow."""
        self.time, self.version, self.step = state["time"], state["version"], state["step"]
        flights = [Flight(*row) for row in state["in_flight"]]
        self.in_flight = [(f.arrives, f.client, f.step, f) for f in flights]
        self.in_flight += [(t, -1, step, None) for t, step in state.get("wakes", [])]
        heapq.heapify(self.in_flight)
        self.buffer = [Flight(*row) for row in state["buffer"]]

    def next_aggregation(self) -> Aggregation:
        """Advance to the next aggregation: take arrivals until the buffer holds K."""
        dropouts: list[Flight] = []
        while True:
            if not self.in_flight:  # only when no client can ever come online again
                raise RuntimeError(
                    f"asynchronous schedule: no client in flight at t={self.time:g} and none "
                    "comes online again (system.availability_trace)"
                )
            arrives, _, _, flight = heapq.heappop(self.in_flight)
            if flight is None:  # a client comes online: fill the free slots now
                self._fill(arrives)
                continue
            if flight.dropped_out:
                dropouts.append(flight)
                self._fill(arrives)
                continue
            self.buffer.append(flight)
            if len(self.buffer) < self.buffer_size:
                self._fill(arrives)
                continue
            done = Aggregation(self.version, arrives, self.buffer, dropouts)
            self.buffer = []
            self.version += 1
            self.time = arrives
            self._fill()
            return done


def _flight_order(f: Flight) -> tuple[float, int, int]:
    return (f.arrives, f.client, f.step)

