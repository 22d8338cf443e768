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

from fedsim.errors import ConfigError
from fedsim.tracking.client_names import client_names, name_of
from fedsim.tracking.clients_hurt import HurtSummary, Z, clients_hurt, selected_round
from fedsim.tracking.run_data import RunData


def judged_on(run: RunData) -> str:
    """``perplexity`` for a next-token run that recorded its loss spread, else ``accuracy``."""
    has = all(k in run.clients for k in ("perplexity", "loss_sd"))
    return "perplexity" if has and np.isfinite(run.clients["loss_sd"]).any() else "accuracy"


def _loss_rows(columns: dict[str, np.ndarray], round_idx: int) -> dict[int, tuple[float, ...]]:
    """client -> (mean loss, loss sd, test tokens) at ``round_idx``."""
    if not len(columns.get("round", [])):
        return {}
    at = columns["round"] == round_idx
    picked = zip(columns["client"][at], columns["loss"][at], columns["loss_sd"][at],
                 columns["n"][at], strict=True)  # fmt: skip
    return {int(c): (float(loss), float(sd), int(n)) for c, loss, sd, n in picked}


def clients_hurt_on_metric(
    run: RunData, reference: RunData, held_out: bool = False
) -> HurtSummary:
    """``clients_hurt`` on the metric the table reports: the loss (perplexity) with its
    per-token noise band where both runs have one, else accuracy. ``differences`` are
    gains (the reference's loss minus the run's: positive is better)."""
    if judged_on(run) != "perplexity" or judged_on(reference) != "perplexity":
        return clients_hurt(run, reference, held_out)
    (r_round, how), (ref_round, ref_how) = selected_round(run), selected_round(reference)
    part = "held_out" if held_out else "clients"
    mine = _loss_rows(getattr(run, part), r_round)
    theirs = _loss_rows(getattr(reference, part), ref_round)
    common = sorted(set(mine) & set(theirs))
    for c in common:
        if mine[c][2] != theirs[c][2]:
            raise ConfigError(
                "reference", str(reference.run_dir), f"client {c} has {theirs[c][2]} test "
                f"tokens there and {mine[c][2]} in {run.run_dir}: not the same clients "
                "(compare runs of the same data, partition and seed)",
            )  # fmt: skip
    loss_a, sd_a, n = (np.array([mine[c][i] for c in common], dtype=float) for i in range(3))
    loss_r, sd_r = (np.array([theirs[c][i] for c in common], dtype=float) for i in range(2))
    noise = Z * np.sqrt((sd_a**2 + sd_r**2) / np.maximum(n, 1))
    selection = how if how == ref_how else f"{how} vs the reference's {ref_how}"
    return HurtSummary(np.array(common, dtype=np.int64), loss_r - loss_a, noise, selection,
                       metric="perplexity")  # fmt: skip


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
