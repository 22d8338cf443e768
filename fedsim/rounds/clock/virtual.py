"""The virtual clock both round kinds share: how long a client takes, whether it drops out,
and how long its model takes to move.

A client's compute time is the samples it trains on in a round (one formula:
``fedsim.client_work.LocalWork.samples``) times its seconds per sample (a slowdown drawn once
from ``system.speeds`` by ``draw_slowdowns``, times ``system.time_per_sample``, or a
trace's); whether it drops out of a dispatch is one seeded draw per (step, client)
(``VirtualClock``); its transfers take bytes / bandwidth
(``transfer_seconds``, over its ``Network`` bandwidths). Synchronous rounds
(``sync.py``) time the bytes each client really moved; asynchronous rounds
(``fedsim/rounds/buffered.py``) time a model's size each way before training. Both through these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedsim.config.system import SpeedSpec, parse_speeds
from fedsim.streams import DROPOUT_TAG


def transfer_seconds(nbytes: float | np.ndarray, bandwidth: float | np.ndarray) -> np.ndarray:
    """Seconds to move ``nbytes`` at ``bandwidth`` bytes/s, elementwise (an infinite
    bandwidth, or nothing to move: 0)."""
    nbytes, bandwidth = np.asarray(nbytes, np.float64), np.asarray(bandwidth, np.float64)
    return np.where(np.isinf(bandwidth) | (nbytes == 0), 0.0, nbytes / bandwidth)


@dataclass(frozen=True)
class Network:
    """Each client's upload and download bandwidth in bytes/s (inf: transfers are free)."""

    upload: np.ndarray
    download: np.ndarray

    @classmethod
    def free(cls, num_clients: int) -> Network:
        inf = np.full(num_clients, np.inf)
        return cls(inf, inf.copy())


def draw_slowdowns(spec: str | SpeedSpec, num_clients: int, seed: Sequence[int]) -> np.ndarray:
    """Per-client virtual time per unit of work (larger = slower), seeded by ``seed``.

    ``constant``: 1; ``lognormal:MU,SIGMA``: exp(N(MU, SIGMA^2)); ``uniform:LOW,HIGH``;
    ``slow_fraction:F,K``: exactly floor(F * n + 1/2) clients, chosen at random, are K times slower.
    """
    parsed = parse_speeds(spec) if isinstance(spec, str) else spec
    rng = np.random.default_rng(np.random.SeedSequence(list(seed)))
    if parsed.kind == "constant":
        return np.ones(num_clients)
    if parsed.kind == "lognormal":
        return rng.lognormal(parsed.params[0], parsed.params[1], num_clients)
    if parsed.kind == "uniform":
        return rng.uniform(parsed.params[0], parsed.params[1], num_clients)
    fraction, factor = parsed.params
    slowdowns = np.ones(num_clients)
    slow = int(np.floor(fraction * num_clients + 0.5))
    slowdowns[rng.permutation(num_clients)[:slow]] = factor
    return slowdowns


@dataclass
class VirtualClock:
    """Seeded virtual time of clients: durations, dropouts, arrival times (picklable)."""

    seconds_per_sample: np.ndarray  # each client's virtual seconds to train one sample
    dropout: float = 0.0
    seed: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        if not 0 <= self.dropout < 1:
            raise ValueError(f"system.dropout={self.dropout!r}: must be in [0, 1)")
        self.seconds_per_sample = np.asarray(self.seconds_per_sample, dtype=np.float64)
        self.seed = tuple(int(s) for s in self.seed)

    @classmethod
    def from_spec(
        cls, spec: str, num_clients: int, seed: Sequence[int], dropout: float = 0.0
    ) -> VirtualClock:
        """Draw every client's slowdown from ``spec`` (see ``draw_slowdowns``)."""
        return cls(draw_slowdowns(spec, num_clients, seed), dropout, tuple(seed))

    def durations(self, clients: Sequence[int], work: Sequence[float] | float) -> np.ndarray:
        """Virtual time each client needs to train ``work`` samples (``ClientWork.samples``)."""
        per_sample = self.seconds_per_sample[np.asarray(clients, int)]
        return np.asarray(work, dtype=np.float64) * per_sample

    def dropped(self, clients: Sequence[int], step: int) -> np.ndarray:
        """Whether each client drops out of dispatch ``step`` (same (step, client), same answer).

        One uniform draw per client of the federation per step, so the answer does not
        depend on who else is in the cohort.
        """
        rng = np.random.default_rng(np.random.SeedSequence([*self.seed, DROPOUT_TAG, step]))
        return rng.random(self.seconds_per_sample.size)[np.asarray(clients, int)] < self.dropout

    def arrivals(
        self,
        clients: Sequence[int],
        work: Sequence[float] | float,
        start: Sequence[float] | float,
        step: int,
    ) -> np.ndarray:
        """Arrival times ``start + duration``; inf for clients that dropped out."""
        times = np.asarray(start, dtype=np.float64) + self.durations(clients, work)
        return np.where(self.dropped(clients, step), np.inf, times)
