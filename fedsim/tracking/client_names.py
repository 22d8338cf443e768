"""Each client's name, from partition.json: the name the data gives it (a natural partition's
``data.partition.by`` value: a writer, a hospital; Shakespeare's role), else, with held-out
clients, its id in the partition as drawn (the same with and without hold-out, where the run
ids of the training clients close up and the held-out ones follow).

Runs whose clients have no other name than their id get no names ({}), and no
``client_name`` column.
"""

from __future__ import annotations

from typing import Any

NAME_FIELDS = ("role",)  # a natural client's record field that names it (Shakespeare)


def client_names(partition: dict[str, Any]) -> dict[int, str]:
    """Run id -> name, from a run's partition.json (``{}``: the ids are the names)."""
    inner = partition.get("partition") if isinstance(partition, dict) else None
    if not isinstance(inner, dict):
        return {}
    names: dict[int, str] = {}
    by = inner.get("by")
    for record in inner.get("clients") or []:
        if not isinstance(record, dict) or not isinstance(record.get("client"), int):
            continue
        fields = (by,) if by else NAME_FIELDS
        value = next((record[f] for f in fields if f in record and record[f] is not None), None)
        if value is not None:
            names[record["client"]] = str(value)
    order = (inner.get("holdout") or {}).get("partition_ids")
    if isinstance(order, list):
        for run_id, drawn in enumerate(order):
            names.setdefault(run_id, str(drawn))
    return names


def name_of(names: dict[int, str], client: int) -> str:
    """``client``'s name (its id where it has no other)."""
    return names.get(client, str(client))
