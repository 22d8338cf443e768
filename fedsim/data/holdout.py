"""Held-out clients (``eval.holdout_clients``): drawn by the seed (or chosen by name,
``eval.holdout_names``), they never train.

The federation keeps the other clients in their order as clients ``0..M-1``, so every
algorithm sees a federation of ``M`` clients exactly as a run of ``M`` clients would; the
held-out ones follow as clients ``M..N-1`` (``FederatedData.newcomers``), evaluated as
newcomers. partition.json lists every client under its run id, with ``held_out`` marked,
and ``partition.holdout`` records each run id's place in the partition as drawn.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fedsim.data.federated import FederatedData
from fedsim.errors import ConfigError
from fedsim.streams import HOLDOUT_TAG


def holdout_count(value: float, num_clients: int) -> int:
    """How many of ``num_clients`` clients ``eval.holdout_clients=value`` holds out
    (a fraction rounds to the nearest count, at least 1); ConfigError unless at least one
    client is left to train."""
    count = int(value) if value >= 1 else max(1, round(value * num_clients)) if value else 0
    if count >= num_clients:
        shown = f"{value} ({count} clients)" if value < 1 else int(value)
        raise ConfigError(
            "eval.holdout_clients",
            shown,
            f"leaves no client to train among data.num_clients={num_clients}; hold out at "
            f"most {num_clients - 1}",
        )
    return count


def held_out_ids(num_clients: int, count: int, seed: int) -> list[int]:
    """Which ``count`` of the partition's ``num_clients`` clients are held out (sorted)."""
    if count == 0:
        return []
    rng = np.random.default_rng([seed, HOLDOUT_TAG])
    return sorted(rng.choice(num_clients, size=count, replace=False).tolist())


def named_ids(partition: dict[str, Any], patterns: list[str]) -> list[int]:
    """The clients whose name (a natural partition's ``by`` value) matches one of the shell
    ``patterns`` (``eval.holdout_names``), sorted; ConfigError when none has a name or
    every client or none matches."""
    from fedsim.data.client_labels import matching

    by = partition.get("by")
    records = partition.get("clients") if by else None
    if not isinstance(records, list) or not records:
        raise ConfigError(
            "eval.holdout_names", patterns, "needs clients named by the data: "
            "data.partition.name=natural with data.partition.by",
        )  # fmt: skip
    names = np.array([str(r.get(by)) for r in records])
    held = np.flatnonzero(matching(names, patterns, "eval.holdout_names")).tolist()
    if len(held) == len(records):
        raise ConfigError("eval.holdout_names", patterns, "matches every client: none would train")
    return held


def hold_out(
    data: FederatedData, count: int, seed: int, ids: list[int] | None = None
) -> FederatedData:
    """``data`` with ``count`` clients drawn by ``seed`` (or the clients ``ids``) moved to
    ``newcomers`` (the others renumbered in order; per-client partition records follow
    them). ``data`` when none."""
    if (count == 0 and not ids) or data.newcomers:
        return data
    held = sorted(ids) if ids else held_out_ids(data.num_clients, count, seed)
    kept = [c for c in range(data.num_clients) if c not in set(held)]
    order = kept + held  # run id -> the partition's client id
    partition = reorder_records(data.partition, order)
    partition["holdout"] = {"partition_ids": order, "held_out": len(held)}
    return dataclasses.replace(
        data,
        clients=[data.clients[c] for c in kept],
        newcomers=[data.clients[c] for c in held],
        partition=partition,
    )


def reorder_records(partition: dict[str, Any], order: list[int]) -> dict[str, Any]:
    """The partition's per-client lists (true clusters, natural clients' records) in run-id
    order, each record's ``client`` its run id."""
    out = dict(partition)
    if out.get("client_clusters") is not None:
        out["client_clusters"] = [out["client_clusters"][c] for c in order]
    if isinstance(out.get("clients"), list) and len(out["clients"]) == len(order):
        out["clients"] = [{**out["clients"][c], "client": run_id} for run_id, c in enumerate(order)]
    return out
