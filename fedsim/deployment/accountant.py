"""Privacy spent, from Google's ``dp-accounting`` RDP accountant (no hand-written formula).

The unit of privacy is one client (user-level DP): neighbouring federations differ in one
client's whole dataset. Epsilon is what a run has spent so far at the given delta.

- ``epsilon`` (central DP): the server sees only the noised sum. Each round is a Poisson
  subsample of clients at ``sample_rate`` followed by a Gaussian mechanism with
  ``noise_multiplier`` (noise std / clip norm), add-or-remove-one adjacency; ``rounds``
  rounds compose. A fixed-size cohort of m of N clients is accounted as Poisson sampling at
  m / N, the usual approximation (TF Federated, Opacus do the same).
- ``local_epsilon`` (local DP): the server sees each client's own noised update, so there is
  no amplification by sampling and the adversary may replace the client's data by anything:
  two clipped updates differ by up to 2 C, i.e. a Gaussian mechanism with multiplier z / 2 per
  round the client took part in. Report it for the client with the most participations.

The RDP curve of one round is computed once per (noise, rate) by the library (0.1-0.5 s)
and cached; T rounds multiply it by T, as the library's ``SelfComposedDpEvent`` does, so
logging epsilon every round is cheap. ``dp_accounting`` is imported on first use.
"""

from __future__ import annotations

import functools
import logging
import math


def _check(noise_multiplier: float, rounds: int, delta: float) -> None:
    if not noise_multiplier >= 0:
        raise ValueError(f"privacy.noise_multiplier={noise_multiplier!r}: must be >= 0")
    if rounds < 0 or int(rounds) != rounds:
        raise ValueError(f"rounds={rounds!r}: must be an integer >= 0")
    if not 0 < delta < 1:
        raise ValueError(f"privacy.delta={delta!r}: must be in (0, 1)")


@functools.lru_cache(maxsize=64)
def _one_round_rdp(noise_multiplier: float, sample_rate: float) -> tuple[tuple, tuple]:
    """(orders, RDP at each order) of one Poisson-sampled Gaussian round, from the library.

    The library logs a warning for each small fractional order whose series does not
    converge and leaves that order out (a valid, slightly looser bound); those are silenced.
    """
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    event = dp_accounting.GaussianDpEvent(noise_multiplier)
    if sample_rate < 1:
        event = dp_accounting.PoissonSampledDpEvent(sample_rate, event)
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)
    try:
        accountant = RdpAccountant()
        accountant.compose(event)
    finally:
        absl_logger.setLevel(level)
    return tuple(accountant._orders), tuple(accountant._rdp)  # dp-accounting 0.6.0 fields


def _epsilon_after(noise_multiplier: float, sample_rate: float, count: int, delta: float) -> float:
    from dp_accounting.rdp import compute_epsilon

    orders, rdp = _one_round_rdp(float(noise_multiplier), float(sample_rate))
    return float(compute_epsilon(orders, [count * r for r in rdp], delta)[0])


def epsilon(noise_multiplier: float, sample_rate: float, rounds: int, delta: float) -> float:
    """Central-DP epsilon after ``rounds`` rounds of Poisson(sample_rate)-sampled Gaussian.

    inf when ``noise_multiplier`` is 0 (and rounds > 0); 0 after 0 rounds.
    """
    _check(noise_multiplier, rounds, delta)
    if not 0 <= sample_rate <= 1:
        raise ValueError(f"sample_rate={sample_rate!r}: must be in [0, 1]")
    if rounds == 0 or sample_rate == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    return _epsilon_after(noise_multiplier, sample_rate, int(rounds), delta)


def local_epsilon(noise_multiplier: float, rounds_participated: int, delta: float) -> float:
    """Local-DP epsilon of one client after it uploaded ``rounds_participated`` noised updates.

    Each upload is a Gaussian mechanism with sensitivity 2 C (any two inputs, both clipped to
    C) and noise z C, i.e. multiplier z / 2; no sampling amplification. Same RDP accountant.
    """
    _check(noise_multiplier, rounds_participated, delta)
    if rounds_participated == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    return _epsilon_after(noise_multiplier / 2, 1.0, int(rounds_participated), delta)


def participation_epsilon(noise_multiplier: float, participations: int, delta: float) -> float:
    """Central-DP epsilon of a client in ``participations`` noised server updates, without
    sampling amplification (asynchronous arrivals are not a sample of the federation).

    Each server update adds noise z C to a sum in which the client's clipped update moves it
    by at most C (add/remove adjacency), so it is a Gaussian mechanism of multiplier z; the
    updates it was not part of do not depend on its data. Same RDP accountant.
    """
    _check(noise_multiplier, participations, delta)
    if participations == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    return _epsilon_after(noise_multiplier, 1.0, int(participations), delta)
