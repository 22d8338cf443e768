"""What ``data.min_samples`` counts in a dataset, and what a refusal that drops clients says:
each client's count (a packed text's windows), largest first, and the value that keeps
``data.num_clients`` of them."""

from __future__ import annotations

import numpy as np

from fedsim.data.dataset_types import Dataset


def sample_unit(dataset: Dataset) -> str:
    """What data.min_samples counts in ``dataset``: samples, or a language model's windows."""
    if getattr(dataset, "next_token", False):
        return f"samples (windows of up to {dataset.seq_len} tokens)"
    return "samples"


def min_samples_hint(counts: np.ndarray, num_clients: int, dataset: Dataset) -> str:
    """What the clients hold (a packed text's windows), largest first, and the
    ``data.min_samples`` that keeps ``num_clients`` of them: the end of a refusal."""
    unit = "windows" if getattr(dataset, "next_token", False) and dataset.split_gap else "samples"
    ranked = np.sort(np.asarray(counts, np.int64))[::-1]
    ranked = ranked[ranked > 0]
    shown = ", ".join(str(int(c)) for c in ranked[:8]) + (", ..." if len(ranked) > 8 else "")
    hint = f"; its clients hold {shown or 'none'} {unit} (largest first)"
    if 0 < num_clients <= len(ranked):
        hint += f": data.min_samples={int(ranked[num_clients - 1])} keeps {num_clients}"
    return hint
