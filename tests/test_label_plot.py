"""``plots/label_distribution.png``: each client's training labels, read from partition.json
(stacked bars for a few clients, a sorted heatmap for thousands)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedsim.tracking.label_plot import draw_label_distribution, train_class_counts
from fedsim.tracking.report import LABEL_DISTRIBUTION, pyplot


def partition(counts: list[list[int]]) -> dict:
    return {"clients": [{"client": i, "train_class_counts": row} for i, row in enumerate(counts)]}


def test_counts_are_read_per_client_and_padded_to_the_widest_row() -> None:
    counts = train_class_counts(partition([[3, 0, 1], [0, 2]]))
    assert counts.tolist() == [[3, 0, 1], [0, 2, 0]]
    assert train_class_counts({}).shape == (0, 0)
    assert train_class_counts({"clients": [{"client": 0, "train": 5}]}).shape == (0, 0)


def test_a_few_clients_get_one_stacked_bar_each() -> None:
    plt = pyplot()
    counts = np.array([[5, 0, 2], [0, 4, 0]])
    fig = draw_label_distribution(plt, counts, "run")
    ax = fig.axes[0]
    heights = np.array([[bar.get_height() for bar in c] for c in ax.containers])  # class x client
    assert heights.T.tolist() == counts.tolist()
    assert "2 clients, 3 classes" in ax.get_title()
    plt.close(fig)


def test_thousands_of_clients_get_shares_sorted_by_their_main_class() -> None:
    plt = pyplot()
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 5, size=(3597, 62))
    counts[np.arange(3597), rng.integers(0, 62, size=3597)] += 50  # one main class each
    fig = draw_label_distribution(plt, counts, "run")
    shown = fig.axes[0].get_images()[0].get_array()
    assert shown.shape == (3597, 62)
    np.testing.assert_allclose(shown.sum(axis=1), 1.0)  # each row: one client's shares
    main = shown.argmax(axis=1)
    assert (np.diff(main) >= 0).all()  # a staircase, not noise
    shares = counts / counts.sum(axis=1, keepdims=True)
    assert sorted(map(tuple, np.round(shown, 9))) == sorted(map(tuple, np.round(shares, 9)))
    plt.close(fig)


@pytest.mark.xdist_group("tracking_runs")  # the session's tiny finished runs (conftest)
def test_every_run_draws_it_from_its_partition(runs) -> None:
    run_dir = runs["cwfedavg"]  # 6 Dirichlet clients of mnist-5k
    clients = json.loads((run_dir / "partition.json").read_text())["clients"]
    counts = train_class_counts({"clients": clients})
    assert counts.shape == (6, 10)
    assert counts.sum(axis=1).tolist() == [c["train"] for c in clients]
    assert (run_dir / "plots" / LABEL_DISTRIBUTION).stat().st_size > 0
