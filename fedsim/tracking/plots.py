"""Plots written into ``<run_dir>/plots/`` at the end of a run (matplotlib, Agg backend).

``row_norms.png``: per client, the L2 norms of the output-layer weight rows of the model the
client evaluates at the end (normalized to sum 1), next to its true training class
proportions. This is cwFedAvg's figure: with WDR the row norms follow each client's class
distribution; under FedAvg every client shows the same row.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from fedsim.simulation import RunResult, Simulation

ROW_NORMS_PNG = "row_norms.png"


def evaluated_row_norms(simulation: Simulation, result: RunResult) -> np.ndarray:
    """(clients, K): normalized output-row norms of each client's model at the end of the run.

    The model is what the algorithm gives the client to evaluate (its personalized model),
    rebuilt on the driver through the algorithm seam from the final server and client state.
    """
    from fedsim.algorithms.base import ClientInfo
    from fedsim.algorithms.cwfedavg import output_weight_name

    algorithm, federation, data = simulation.algorithm, simulation.federation, simulation.data
    layout = federation.layout
    weight_name = output_weight_name(federation)
    broadcast = algorithm.broadcast(result.state)
    counts, sizes = federation.class_counts, federation.train_sizes
    rows = []
    for client in range(data.num_clients):
        info = ClientInfo(
            client=client,
            num_train=int(sizes[client]),
            class_counts=counts[client],
            round=simulation.cfg.rounds,
        )
        payload = algorithm.client_payload(result.state, client)
        plan = algorithm.client_start(broadcast, payload, result.client_store.get(client), info)
        params = plan.train_params if plan.eval_params is None else plan.eval_params
        norms = torch.linalg.vector_norm(layout.view(params, weight_name).float(), dim=1)
        rows.append((norms / norms.sum()).numpy())
    return np.stack(rows)


def mean_row_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over rows of the Pearson correlation of a[i] and b[i] (constant rows count 0)."""
    values = []
    for x, y in zip(a, b, strict=True):
        sx, sy = x.std(), y.std()
        covariance = float(np.mean((x - x.mean()) * (y - y.mean())))
        values.append(0.0 if sx == 0 or sy == 0 else covariance / float(sx * sy))
    return float(np.mean(values)) if values else 0.0


def write_row_norm_heatmap(
    path: Path, row_norms: np.ndarray, proportions: np.ndarray, title: str = ""
) -> Path:
    """Two heatmaps, clients x classes: normalized row norms and true class proportions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clients, classes = row_norms.shape
    fig, axes = plt.subplots(
        1, 2, figsize=(3 + 0.45 * classes * 2, 1.5 + 0.25 * clients), squeeze=False
    )
    panels = (
        (row_norms, "output-row norms (normalized)"),
        (proportions, "class proportions p_i (train)"),
    )
    for ax, (values, label) in zip(axes[0], panels, strict=True):
        # each panel on its own scale: row norms of a head are rarely as peaked as p_i
        image = ax.imshow(values, aspect="auto", cmap="viridis", vmin=0.0)
        fig.colorbar(image, ax=ax, shrink=0.8)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("class")
        ax.set_ylabel("client")
        if classes <= 20:
            ax.set_xticks(range(classes))
        if clients <= 40:
            ax.set_yticks(range(clients))
        ax.tick_params(labelsize=6)
    corr = mean_row_correlation(row_norms, proportions)
    fig.suptitle(f"{title}  mean per-client corr = {corr:.3f}".strip(), fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_run_plots(run_dir: Path, simulation: Simulation, result: RunResult) -> list[Path]:
    """Every end-of-run plot into ``run_dir/plots/``; returns the files written.

    The row-norm heatmap is drawn for algorithms that set ``row_norm_plot = True`` (their
    ``client_start`` must work on the driver, without a worker's probe) and whose model has a
    Linear output layer. A plotting error is printed, never raised: the results are saved.
    """
    from fedsim.algorithms.cwfedavg import output_weight_name

    if not getattr(simulation.algorithm, "row_norm_plot", False):
        return []
    try:
        output_weight_name(simulation.federation)
    except ValueError:
        return []
    try:
        return _write_row_norms(Path(run_dir), simulation, result)
    except Exception as err:  # noqa: BLE001 - plots must not fail a finished run
        print(f"fedsim: row-norm plot failed: {err.__class__.__name__}: {err}", file=sys.stderr)
        return []


def _write_row_norms(run_dir: Path, simulation: Simulation, result: RunResult) -> list[Path]:
    counts = simulation.federation.class_counts.astype(np.float64)
    proportions = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    norms = evaluated_row_norms(simulation, result)
    cfg = simulation.cfg
    title = f"{cfg.name}: {cfg.algorithm.name}, round {cfg.rounds}"
    path = run_dir / "plots" / ROW_NORMS_PNG
    return [write_row_norm_heatmap(path, norms, proportions, title)]
