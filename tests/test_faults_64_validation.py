"""Issue 64: the validation split of overlapping sequence samples (character windows, packed
token windows) is a contiguous block at the end of each client's training text that shares
no token with training, as the test split is; a ratio that leaves none is one line."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.data.federated import ClientSplit, FederatedData
from fedsim.data.lm_text import TokenDataset
from fedsim.data.text import TextDataset
from fedsim.data.validation import carve_validation
from fedsim.errors import ConfigError

SEQ = 5


def char_windows(sizes: list[int]) -> tuple[FederatedData, list[np.ndarray]]:
    """Each client's text one after another, one window per character: (the federation,
    each sample's token positions)."""
    n = sum(2 * s for s in sizes)
    tokens = (np.arange(n + SEQ + 1) % 70).astype(np.uint8)
    starts = np.arange(n, dtype=np.int64)
    dataset = TextDataset("chars", tokens, starts, tokens[starts + SEQ].astype(np.int64),
                          seq_len=SEQ)  # fmt: skip
    spans = [np.arange(s, s + SEQ + 1) for s in starts]  # inputs and the target
    return FederatedData(dataset, splits(sizes), {"name": "chars"}), spans


def packed_windows(sizes: list[int]) -> tuple[FederatedData, list[np.ndarray]]:
    """Packed windows: a window's last target is the next one's first input."""
    n = sum(2 * s for s in sizes)
    starts = np.arange(n, dtype=np.int64) * SEQ
    dataset = TokenDataset(
        "packed", np.zeros(n * SEQ + SEQ + 1, np.int32), starts,
        np.full(n, SEQ + 1, np.int32), np.zeros(n, np.int64), 50, SEQ, "toy",
    )  # fmt: skip
    spans = [np.arange(s, s + SEQ + 1) for s in starts]
    return FederatedData(dataset, splits(sizes), {"name": "packed"}), spans


def splits(sizes: list[int]) -> list[ClientSplit]:
    out, start = [], 0
    for size in sizes:
        train = np.arange(start, start + size, dtype=np.int64)
        out.append(ClientSplit(train=train, test=train + size))
        start += 2 * size
    return out


@pytest.mark.parametrize("build", [char_windows, packed_windows])
def test_validation_of_overlapping_samples_shares_no_token_with_training(build):
    data, spans = build([40, 60])
    gap = data.dataset.split_gap
    carved = carve_validation(data, 0.25, seed=3)
    for before, client in zip(data.clients, carved.clients, strict=True):
        assert len(client.val) == len(before.train) // 4
        # one contiguous block at the end of the client's training text
        np.testing.assert_array_equal(client.val, before.train[-len(client.val) :])
        np.testing.assert_array_equal(client.train, before.train[: len(client.train)])
        assert len(client.train) == len(before.train) - len(client.val) - gap
        train_tokens = set(np.concatenate([spans[i] for i in client.train]).tolist())
        val_tokens = set(np.concatenate([spans[i] for i in client.val]).tolist())
        assert not train_tokens & val_tokens
    assert "its end in order" in carved.partition["validation"]["from"]


def test_a_ratio_that_leaves_no_training_window_is_one_line():
    data, _ = char_windows([12, 40])  # 12 windows: 10 validation + 5 dropped > 12
    with pytest.raises(ConfigError) as err:
        carve_validation(data, 0.9, seed=0)
    line = str(err.value)
    assert line.startswith("eval.validation_ratio=0.9: leaves client 0 no training sample")
    assert "\n" not in line and f"{SEQ} dropped" in line
