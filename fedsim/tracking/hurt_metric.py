"""Clients hurt, and a per-client table, on the metric a comparison reports.

For next-token prediction the table reports perplexity, so a client is judged on its test
loss (the log of its perplexity): the difference of two runs' mean per-token losses on the
client's n test tokens, within noise when at most ``Z`` standard errors of that difference,
``Z * sqrt((sd_a^2 + sd_r^2) / n)``, sd the spread of each run's per-token losses there
(clients.csv's ``loss_sd``). The two runs' losses are on the same tokens and positively
correlated, so this unpaired error is wider than a paired one: a client counted better or
worse is so beyond doubt. Runs without ``loss_sd`` (recorded since issue 60) and runs of
classes are judged on accuracy (``clients_hurt``).
"""

from __future__ import annotations

import numpy as np

from fedsim.tracking.client_names import client_names, name_of
from fedsim.tracking.clients_hurt import (
    HurtSummary,
    Z,
    clients_hurt,
    paired_clients,
    selected_round,
)
from fedsim.tracking.run_data import RunData


def judged_on(run: RunData) -> str:
    """``perplexity`` for a next-token run that recorded its loss spread, else ``accuracy``."""
    has = all(k in run.clients for k in ("perplexity", "loss_sd"))
    return "perplexity" if has and np.isfinite(run.clients["loss_sd"]).any() else "accuracy"


def clients_hurt_on_metric(
    run: RunData, reference: RunData, held_out: bool = False
) -> HurtSummary:
    """``clients_hurt`` on the metric the table reports: the loss (perplexity) with its
    per-token noise band where both runs have one, else accuracy. ``differences`` are
    gains (the reference's loss minus the run's: positive is better)."""
    if judged_on(run) != "perplexity" or judged_on(reference) != "perplexity":
        return clients_hurt(run, reference, held_out)
    paired = paired_clients(run, reference, ("loss", "loss_sd"), held_out)
    loss_a, sd_a, n = paired.column(0), paired.column(1), paired.column(-1)
    loss_r, sd_r = paired.column(0, reference=True), paired.column(1, reference=True)
    noise = Z * np.sqrt((sd_a**2 + sd_r**2) / np.maximum(n, 1))
    return HurtSummary(np.array(paired.clients, dtype=np.int64), loss_r - loss_a, noise,
                       paired.selection, metric="perplexity")  # fmt: skip


def client_metric(run: RunData, metric: str) -> dict[int, tuple[float, bool]]:
    """client -> (its ``metric`` at the run's selected round, held out), every client."""
    round_idx, _ = selected_round(run)
    column = "perplexity" if metric == "perplexity" else "accuracy"
    out: dict[int, tuple[float, bool]] = {}
    for part, held in ((run.clients, False), (run.held_out, True)):
        if not len(part.get("round", [])):
            continue
        at = part["round"] == round_idx
        for c, value in zip(part["client"][at], part[column][at], strict=True):
            out[int(c)] = (float(value), held)
    return out


def client_table_markdown(methods: list) -> str:
    """Per client (named by the data), each method's metric at its selected round, the
    mean over its seeds; perplexity for next-token runs, else accuracy (%). Empty when
    fewer than one method has runs."""
    runs = [run for m in methods for run in m.runs.values()]
    if not runs:
        return ""
    metric = "perplexity" if all(judged_on(r) == "perplexity" for r in runs) else "accuracy"
    names = client_names(runs[0].partition)
    values: dict[int, dict[str, list[float]]] = {}
    held: dict[int, bool] = {}
    for method in methods:
        for run in method.runs.values():
            for c, (v, is_held) in client_metric(run, metric).items():
                values.setdefault(c, {}).setdefault(method.label, []).append(v)
                held[c] = is_held
    scale, unit = (1.0, "") if metric == "perplexity" else (100.0, " (%)")
    lines = ["| client | " + " | ".join(m.label for m in methods) + " |",
             "|---|" + "---:|" * len(methods)]  # fmt: skip
    for c in sorted(values, key=lambda c: (held[c], name_of(names, c))):
        label = name_of(names, c) + (" (held out)" if held[c] else "")
        cells = [values[c].get(m.label) for m in methods]
        shown = ["-" if not v else f"{scale * float(np.mean(v)):.2f}" for v in cells]
        lines.append(f"| {label} | " + " | ".join(shown) + " |")
    how = "lower is better" if metric == "perplexity" else "higher is better"
    head = (f"Per client: test {metric}{unit} at each run's selected round, mean over its "
            f"seeds ({how}).\n\n")  # fmt: skip
    return head + "\n".join(lines) + "\n"


__all__ = ["client_metric", "client_table_markdown", "clients_hurt_on_metric", "judged_on"]
