"""Threshold and top-k encoders (round trips, exact counts, bytes) and error feedback."""

import functools
import pickle

import numpy as np
import pytest
import torch

from fedsim.deployment.compression import (
    ErrorFeedback,
    Sparse,
    encode_threshold,
    encode_topk,
    error_feedback_step,
    make_encoder,
    topk_count,
)


def test_threshold_round_trip_keeps_exactly_the_large_entries():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    sparse = encode_threshold(x, 0.5)
    expected = torch.where(x.abs() > 0.5, x, torch.zeros(()))
    assert torch.equal(sparse.to_dense(), expected)
    assert sparse.indices.dtype == np.int32 and sparse.values.dtype == np.float32
    assert sparse.size == 1000 and len(sparse.indices) == int((x.abs() > 0.5).sum())


def test_threshold_is_strict_and_flattens():
    x = torch.tensor([[0.5, -0.6], [0.1, -0.5]])
    sparse = encode_threshold(x, 0.5)
    assert sparse.indices.tolist() == [1] and sparse.values.tolist() == pytest.approx([-0.6])
    assert torch.equal(sparse.to_dense(), torch.tensor([0.0, -0.6, 0.0, 0.0]))
    with pytest.raises(ValueError, match="compression.threshold"):
        encode_threshold(x, -1.0)


def test_nbytes_by_hand():
    sparse = encode_threshold(torch.tensor([0.0, 2.0, 0.0, -3.0, 1.0]), 0.5)
    assert sparse.indices.tolist() == [1, 3, 4]
    assert sparse.nbytes == 3 * 4 + 3 * 4  # int32 indices + float32 values
    assert Sparse(np.zeros(0, np.int32), np.zeros(0, np.float32), 10).nbytes == 0


def test_topk_exact_count_and_round_trip():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    sparse = encode_topk(x, 0.013)  # ceil(13.0) = 13
    assert len(sparse.indices) == 13
    order = torch.argsort(x.abs(), descending=True)[:13]
    assert sorted(sparse.indices.tolist()) == sorted(order.tolist())
    dense = sparse.to_dense()
    assert torch.equal(dense[order], x[order]) and int((dense != 0).sum()) == 13
    assert list(sparse.indices) == sorted(sparse.indices)


def test_topk_count_rounds_up_and_ignores_float_error():
    assert topk_count(100, 0.07) == 7  # 0.07 * 100 = 7.000000000000001
    assert topk_count(10, 0.01) == 1 and topk_count(10, 0.25) == 3 and topk_count(10, 1.0) == 10
    assert topk_count(0, 0.5) == 0
    assert len(encode_topk(torch.arange(10.0), 1.0).indices) == 10


def test_topk_ties_go_to_the_lowest_index():
    x = torch.tensor([1.0, -2.0, 2.0, 0.5, -2.0, 2.0])
    assert encode_topk(x, 0.5).indices.tolist() == [1, 2, 4]  # 3 of the four |2|s
    assert encode_topk(torch.ones(8), 0.25).indices.tolist() == [0, 1]
    with pytest.raises(ValueError, match="compression.fraction"):
        encode_topk(x, 0.0)


def test_error_feedback_conserves_the_sum():
    generator = torch.Generator().manual_seed(2)
    deltas = [torch.randn(200, generator=generator) for _ in range(6)]
    memory = ErrorFeedback()
    encode = functools.partial(encode_topk, fraction=0.05)
    sent = torch.zeros(200)
    for delta in deltas:
        sparse = memory.compress(delta, encode)
        assert len(sparse.indices) == 10
        sent += sparse.to_dense()
    assert torch.allclose(sent + memory.residual, torch.stack(deltas).sum(0), atol=1e-5)
    memory = pickle.loads(pickle.dumps(memory))
    assert memory.residual.dtype == torch.float32 and memory.residual.shape == (200,)


def test_error_feedback_step_by_hand():
    encode = functools.partial(encode_threshold, tau=1.0)
    sparse, residual = error_feedback_step(torch.tensor([0.6, 2.0, -0.3]), None, encode)
    assert sparse.indices.tolist() == [1]
    assert torch.allclose(residual, torch.tensor([0.6, 0.0, -0.3]))
    # the small entry accumulates until it crosses tau and is sent
    sparse, residual = error_feedback_step(torch.tensor([0.6, 0.0, -0.3]), residual, encode)
    assert sparse.indices.tolist() == [0] and sparse.values.tolist() == pytest.approx([1.2])
    assert torch.allclose(residual, torch.tensor([0.0, 0.0, -0.6]))


def test_make_encoder_validates_and_pickles():
    assert make_encoder("none") is None
    encode = pickle.loads(pickle.dumps(make_encoder("topk", fraction=0.5)))
    assert encode(torch.tensor([1.0, 3.0])).indices.tolist() == [1]
    with pytest.raises(ValueError, match="compression.kind"):
        make_encoder("quantize")
    with pytest.raises(ValueError, match="compression.fraction"):
        make_encoder("topk", fraction=1.5)
    with pytest.raises(ValueError, match="compression.threshold"):
        make_encoder("threshold", threshold=-0.1)
