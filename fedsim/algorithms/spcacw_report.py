"""SP-CACW's round report (summary keys, clients.csv weights) and its alpha figure."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsim.algorithm_params.spcacw import SPCACWParams
from fedsim.algorithms.base import FederationInfo, RoundReport
from fedsim.algorithms.spcacw_estimates import ServerState, variance_matrix
from fedsim.figures import Figure, Panel

ALPHA_SERIES_TARGETS = 4  # targets whose alpha per peer become numeric series (W&B)
FIGURE_TARGETS = 4  # targets drawn in spcacw_alpha.png
ALPHA_PNG = "spcacw_alpha.png"


def round_report(
    params: SPCACWParams,
    targets: list[int],
    state: ServerState,
    losses: list[float],
    pairs: int,
    m: int,
) -> RoundReport:
    """The round's summary keys and the clients.csv weights."""
    alpha = state["alpha"]
    bias_terms, variance_terms = [], []
    for k in range(len(targets)):
        n = max(int(state["terms"][k]), 1)
        a = alpha[k]
        if params.bias_term == "linear":
            bias_terms.append(float(np.diag(state["bias_gram"][k]) @ a) / n)
        else:
            bias_terms.append(float(a @ state["bias_gram"][k] @ a) / n)
        # no term yet: 0, whether or not L has been estimated (lipschitz_due)
        variance = float(a @ variance_matrix(state, k) @ a) / n if state["terms"][k] else 0.0
        variance_terms.append(variance)
    estimated = state["lipschitz"][np.isfinite(state["lipschitz"])]  # from T_start's round
    lipschitz = {"lipschitz": float(np.mean(estimated))} if len(estimated) else {}
    model_bytes = int(state["models"].shape[1]) * state["models"].element_size()
    summary: dict[str, Any] = {
        "train_loss": float(np.mean(losses)) if losses else float("nan"),
        "num_trained": len(targets),
        "bytes_down": pairs * model_bytes,  # the target's model to each joining peer
        "bytes_up": pairs * model_bytes,  # each joining peer's gradient back
        "alpha_zero": float(np.mean((alpha == 0).sum(axis=1))),
        **lipschitz,
        "bias_term": float(np.mean(bias_terms)),
        "variance_term": float(np.mean(variance_terms)),
        "alpha": alpha.tolist(),
    }
    for k, target in enumerate(targets[:ALPHA_SERIES_TARGETS]):
        for peer in range(m):
            summary[f"alpha/{target}/{peer}"] = float(alpha[k, peer])
    weights = {c: float(alpha[:, c].mean()) for c in range(m)}
    return RoundReport(summary=summary, client_weights=weights)


def alpha_figures(
    targets: list[int], federation: FederationInfo, state: ServerState
) -> list[Figure]:
    """alpha over rounds per target (``spcacw_alpha.png``), peers coloured by cluster."""
    history = state["alpha_history"]
    if not len(history):
        history = state["alpha"][None]
    clusters = federation.client_clusters
    m = federation.num_clients
    labels = tuple(
        f"client {i}" + ("" if clusters is None else f" (cluster {clusters[i]})") for i in range(m)
    )
    groups = () if clusters is None else tuple(int(c) for c in clusters)
    panels = [
        Panel(
            history[:, k, :].T,
            title=f"target {target}",
            xlabel="round",
            ylabel="alpha",
            kind="lines",
            x=np.arange(1, len(history) + 1),
            labels=labels if m <= 20 else (),
            groups=groups,
        )
        for k, target in enumerate(targets[:FIGURE_TARGETS])
    ]
    title = "SP-CACW: collaboration weights alpha per peer" + (
        "; colour = true cluster" if clusters is not None else ""
    )
    return [Figure(ALPHA_PNG, title, tuple(panels))]
