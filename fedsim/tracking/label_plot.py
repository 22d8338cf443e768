"""``label_distribution.png``: which labels each client trains on, from partition.json.

Up to ``BARS_UP_TO_CLIENTS`` clients and ``BARS_UP_TO_CLASSES`` classes: one stacked bar per
client (its training samples, a colour per class), so both the label skew and the size skew
show. More clients or classes (FEMNIST's 3,597 writers, Shakespeare's characters): a
heatmap of each client's share per class, clients as rows, which stays readable at any size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsim.tracking.client_names import client_names, name_of

BARS_UP_TO_CLIENTS = 60
BARS_UP_TO_CLASSES = 20


def train_class_counts(partition: dict[str, Any]) -> np.ndarray:
    """Clients x classes training-sample counts (empty when partition.json has none)."""
    rows = [c.get("train_class_counts") for c in partition.get("clients", [])]
    if not rows or any(not isinstance(r, list) for r in rows):
        return np.zeros((0, 0), dtype=np.int64)
    width = max(len(r) for r in rows)
    return np.array([r + [0] * (width - len(r)) for r in rows], dtype=np.int64)


def draw_label_distribution(
    plt: Any, counts: np.ndarray, label: str, names: list[str] | None = None
) -> Any:
    """The figure for ``counts`` (clients x classes); ``label`` names the run; ``names``:
    each client's name from the data (its bar is labelled with it; None: its id)."""
    clients, classes = counts.shape
    title = f"{label}: training labels of each client ({clients} clients, {classes} classes)"
    if clients == 0:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        ax.text(0.5, 0.5, "partition.json lists no per-client class counts", ha="center")
        ax.set_axis_off()
    elif clients <= BARS_UP_TO_CLIENTS and classes <= BARS_UP_TO_CLASSES:
        fig, ax = plt.subplots(figsize=(min(12.0, max(6.4, 0.25 * clients + 2)), 4.2))
        colours = plt.get_cmap("tab10" if classes <= 10 else "tab20")
        bottom = np.zeros(clients)
        for k in range(classes):
            ax.bar(np.arange(clients), counts[:, k], bottom=bottom, width=0.85,
                   color=colours(k), label=str(k))  # fmt: skip
            bottom += counts[:, k]
        ax.set_xlabel("client")
        ax.set_ylabel("training samples")
        ax.set_xlim(-0.6, clients - 0.4)
        if names is not None and len(names) == clients:  # the data's names for its clients
            ax.set_xticks(np.arange(clients), names, rotation=60, ha="right", fontsize=7)
        else:
            ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(title="class", fontsize=7, title_fontsize=8, ncol=1 if classes <= 10 else 2,
                  loc="upper left", bbox_to_anchor=(1.01, 1.0))  # fmt: skip
    else:
        fig, ax = plt.subplots(figsize=(max(6.4, min(12.0, 0.12 * classes + 4)), 6))
        totals = counts.sum(axis=1, keepdims=True)
        share = np.divide(counts, totals, out=np.zeros(counts.shape), where=totals > 0)
        # rows sorted by each client's most frequent class, then its share of it: the skew
        # shows as blocks instead of noise when there are more clients than pixel rows
        top = share.argmax(axis=1)
        order = np.lexsort((-share[np.arange(clients), top], top))
        image = ax.imshow(share[order], aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0,
                          interpolation="antialiased")  # fmt: skip
        fig.colorbar(image, ax=ax, shrink=0.8, label="share of the client's training samples")
        ax.set_xlabel("class")
        ax.set_ylabel("clients, by their most frequent class")
    ax.set_title(title, fontsize=10)
    return fig


def plot_label_distribution(plt: Any, partition: dict[str, Any], label: str) -> Any:
    """``draw_label_distribution`` on partition.json's training class counts, the clients
    named as the data names them (``client_names``), where it does."""
    counts = train_class_counts(partition)
    names = client_names(partition)
    shown = [name_of(names, c) for c in range(len(counts))] if names else None
    return draw_label_distribution(plt, counts, label, shown)
