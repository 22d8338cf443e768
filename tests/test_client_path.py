"""The per-client path's shortcuts give the same numbers as the plain computations."""

from __future__ import annotations

import math

import pytest
import torch

from fedsim.algorithms.base import WeightedSum
from fedsim.runtime.worker import all_finite


def reference_sum(terms: list[tuple[float, torch.Tensor]]) -> torch.Tensor:
    """sum_i w_i x_i as WeightedSum computed it before: a float64 term per client."""
    total = None
    for weight, value in terms:
        term = value.detach().to(torch.float64) * weight
        total = term if total is None else total.add_(term)
    return total


@pytest.mark.parametrize("weights", [[52, 17, 1, 2048, 3], [0.1234567, 1 / 3, 17.3, 2.5e-3, 9.0]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weighted_sum_is_bit_identical_to_the_float64_terms(weights, dtype):
    gen = torch.Generator().manual_seed(0)
    terms = [
        (w, (torch.randn(1000, generator=gen) * 10 ** (i - 2)).to(dtype))
        for i, w in enumerate(weights)
    ]
    ws = WeightedSum()
    for weight, value in terms:
        ws.add(weight, value)
    assert torch.equal(ws.value, reference_sum(terms))  # bit for bit, not approximately
    assert ws.weight == pytest.approx(sum(weights))


def test_weighted_sums_of_different_shapes_interleaved_do_not_share_scratch():
    gen = torch.Generator().manual_seed(1)
    big = [(0.3 * (i + 1), torch.randn(50, 7, generator=gen)) for i in range(3)]
    small = [(1.7 * (i + 1), torch.randn(5, generator=gen)) for i in range(3)]
    a, b = WeightedSum(), WeightedSum()
    for (wa, xa), (wb, xb) in zip(big, small, strict=True):
        a.add(wa, xa)
        b.add(wb, xb)
    assert torch.equal(a.value, reference_sum(big))
    assert torch.equal(b.value, reference_sum(small))
    assert a.value.shape == (50, 7) and b.value.shape == (5,)


def test_weighted_sum_does_not_change_its_inputs():
    x = torch.arange(6, dtype=torch.float64)
    ws = WeightedSum()
    ws.add(2.0, x)
    ws.add(0.5, x)
    assert torch.equal(x, torch.arange(6, dtype=torch.float64))
    assert torch.equal(ws.value, x * 2.5)


@pytest.mark.parametrize(
    ("value", "finite"),
    [
        (0.0, True),
        (3.0e38, True),
        (-3.0e38, True),
        (math.inf, False),
        (-math.inf, False),
        (math.nan, False),
    ],
)
def test_all_finite_agrees_with_isfinite(value, finite):
    x = torch.full((100_000,), 3.0e38)  # their float32 sum overflows: checked entry-wise
    x[123] = value
    assert all_finite(x) is finite
    assert finite == bool(torch.isfinite(x).all())


def test_all_finite_sees_opposite_infinities():
    x = torch.zeros(10)
    x[2], x[7] = math.inf, -math.inf  # sum is nan: still not finite
    assert not all_finite(x)
