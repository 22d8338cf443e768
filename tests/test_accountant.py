"""Epsilon from dp-accounting: a cross-library reference, closed forms, monotonicity."""

import logging
import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from fedsim.deployment.accountant import epsilon, local_epsilon


def improved_rdp_to_dp(rdp: np.ndarray, orders: np.ndarray, delta: float) -> float:
    """Balle et al. 2020 / Canonne-Kamath-Steinke conversion, minimised over ``orders``."""
    eps = rdp + np.log1p(-1 / orders) - np.log(delta * orders) / (orders - 1)
    return float(eps.min())


def gaussian_rdp_epsilon(noise_multiplier: float, rounds: int, delta: float) -> float:
    """Closed form: the Gaussian mechanism has RDP alpha / (2 z^2), composed ``rounds`` times."""
    orders = np.linspace(1.02, 400, 400_000)
    return improved_rdp_to_dp(rounds * orders / (2 * noise_multiplier**2), orders, delta)


def exact_gaussian_epsilon(noise_multiplier: float, rounds: int, delta: float) -> float:
    """The tight (eps, delta) of ``rounds`` Gaussians (Balle & Wang 2018): mu = sqrt(T) / z."""
    mu = math.sqrt(rounds) / noise_multiplier

    def gap(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return brentq(gap, 0.0, 500.0)


def test_reference_number_agrees_with_opacus():
    # Opacus 1.6.0 RDPAccountant, history [(1.1, 0.01, 1000)], get_epsilon(1e-5): 1.71177009
    assert epsilon(1.1, 0.01, 1000, 1e-5) == pytest.approx(1.71177009, rel=1e-6)


@pytest.mark.parametrize("z, rounds", [(1.0, 1), (1.0, 10), (2.0, 50), (5.0, 200)])
def test_full_participation_matches_the_gaussian_closed_form(z, rounds):
    eps = epsilon(z, 1.0, rounds, 1e-5)
    closed = gaussian_rdp_epsilon(z, rounds, 1e-5)
    # the library searches a fixed grid of orders, the closed form a fine one
    assert closed <= eps + 1e-9 and eps == pytest.approx(closed, rel=1e-3)
    # a valid bound: never below the exact privacy curve of T Gaussians, and not far above
    exact = exact_gaussian_epsilon(z, rounds, 1e-5)
    assert exact < eps < 1.1 * exact


def test_equals_the_library_composing_every_round_itself():
    import dp_accounting

    for z, q, rounds in [(1.1, 0.01, 1000), (0.7, 0.3, 37)]:
        round_event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
        accountant = dp_accounting.rdp.RdpAccountant()
        accountant.compose(dp_accounting.SelfComposedDpEvent(round_event, rounds))
        assert epsilon(z, q, rounds, 1e-6) == pytest.approx(accountant.get_epsilon(1e-6), rel=1e-12)


def test_monotone_in_rounds_noise_and_sample_rate():
    by_rounds = [epsilon(1.0, 0.1, t, 1e-5) for t in (1, 10, 100, 1000)]
    assert by_rounds == sorted(by_rounds) and len(set(by_rounds)) == 4
    by_noise = [epsilon(z, 0.1, 100, 1e-5) for z in (0.5, 1.0, 4.0)]
    assert by_noise == sorted(by_noise, reverse=True)
    by_rate = [epsilon(1.0, q, 100, 1e-5) for q in (0.01, 0.1, 1.0)]
    assert by_rate == sorted(by_rate)
    assert epsilon(1.0, 0.1, 100, 1e-3) < epsilon(1.0, 0.1, 100, 1e-7)


def test_library_convergence_warnings_are_not_logged(caplog):
    with caplog.at_level(logging.WARNING):
        epsilon(0.9, 0.2, 10, 1e-5)  # small orders do not converge at this noise
    assert not [r for r in caplog.records if r.name == "absl"]


def test_edge_cases():
    assert epsilon(0.0, 0.1, 10, 1e-5) == math.inf
    assert epsilon(1.0, 0.1, 0, 1e-5) == 0.0
    assert local_epsilon(0.0, 3, 1e-5) == math.inf
    assert local_epsilon(1.0, 0, 1e-5) == 0.0
    for bad in [
        (-1.0, 0.1, 10, 1e-5),
        (1.0, 1.5, 10, 1e-5),
        (1.0, 0.1, -1, 1e-5),
        (1.0, 0.1, 10, 0.0),
    ]:
        with pytest.raises(ValueError):
            epsilon(*bad)


def test_local_dp_is_a_gaussian_with_half_the_multiplier_per_upload():
    # sensitivity 2C, noise zC: the same as the central mechanism at z / 2, no sampling
    assert local_epsilon(2.0, 10, 1e-5) == pytest.approx(epsilon(1.0, 1.0, 10, 1e-5))
    assert local_epsilon(4.0, 20, 1e-5) == pytest.approx(
        gaussian_rdp_epsilon(2.0, 20, 1e-5), rel=1e-3
    )
    assert local_epsilon(1.0, 10, 1e-5) > epsilon(1.0, 0.1, 100, 1e-5)
