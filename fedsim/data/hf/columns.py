"""Columns of an ``hf:`` table as numpy arrays, read column-wise from Arrow.

``datasets``' row iterator decodes every value of every row into Python objects: a million
tabular rows of 16 columns took minutes. Labels, numeric feature columns, a column of 1-D
arrays and the ``data.partition.by`` column are read here straight from the Arrow columns
(``to_numpy``) instead, to the same arrays; images are still decoded row by row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsim.errors import ConfigError

NOT_CLASSES = "not a class: labels must be integers >= 0, strings or true/false"


def arrow_column(table: Any, name: str) -> Any:
    """Column ``name`` of a ``datasets.Dataset`` as a pyarrow ChunkedArray (its rows in the
    dataset's order: a selection or concatenation is respected)."""
    import pyarrow as pa

    column = table.with_format("arrow")[name]
    return column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column])


def label_ids(table: Any, name: str) -> tuple[np.ndarray, list[str]] | None:
    """(int64 class ids, class names) of a label column of booleans, strings or numbers,
    read column-wise; None for any other Arrow type (the caller reads it row by row).
    Raises a ConfigError naming the first value that is not a class."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = arrow_column(table, name)
    kind = column.type
    if column.null_count:
        raise ConfigError("data.label_column", name, f"holds None, {NOT_CLASSES}")
    if pa.types.is_boolean(kind):  # CelebA's Smiling
        return column.to_numpy().astype(np.int64), ["False", "True"]
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        names, ids = np.unique(column.to_numpy(zero_copy_only=False), return_inverse=True)
        return ids.astype(np.int64).reshape(-1), [str(n) for n in names]
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return None
    values = column.to_numpy()
    ok = values >= 0
    if values.dtype.kind == "f":  # a whole number >= 0 (NaN and inf are not)
        ok &= np.isfinite(values)
        ok[ok] = values[ok] == np.floor(values[ok])
    bad = ~ok
    if bad.any():
        first = pc.take(column, [int(np.argmax(bad))])[0].as_py()
        raise ConfigError("data.label_column", name, f"holds {first!r}, {NOT_CLASSES}")
    labels = values.astype(np.float64).astype(np.int64)
    return labels, [str(i) for i in range(int(labels.max()) + 1 if len(labels) else 0)]


def numeric_columns(table: Any, columns: tuple[str, ...]) -> np.ndarray:
    """float64 (rows, columns) of numeric columns (a null is NaN, refused later as not
    finite); a ConfigError for a column numpy cannot read as numbers."""
    out = []
    for name in columns:
        values = arrow_column(table, name).to_numpy()
        try:
            out.append(np.asarray(values, dtype=np.float64))
        except (TypeError, ValueError):
            raise ConfigError("data.input_column", name, "rows are not numbers") from None
    return np.stack(out, axis=1)


def vector_column(table: Any, name: str) -> np.ndarray:
    """float64 (rows, length) of a column of 1-D numeric arrays of one length."""
    import pyarrow.compute as pc

    column = arrow_column(table, name).combine_chunks()
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    if column.null_count or (len(lengths) and (lengths != lengths[0]).any()):
        raise ConfigError("data.input_column", name, "rows are not numbers of one length each")
    flat = column.flatten().to_numpy(zero_copy_only=False)
    try:
        values = np.asarray(flat, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError("data.input_column", name, "rows are not numbers") from None
    return values.reshape(len(column), int(lengths[0]) if len(lengths) else 0)


def group_values(table: Any, name: str) -> np.ndarray:
    """Each row's ``data.partition.by`` value as Python objects (str, int...); a ConfigError
    where a row has none (null, NaN), which would otherwise join a client named "None"."""
    values = arrow_column(table, name).to_pylist()
    missing = sum(v is None or (isinstance(v, float) and v != v) for v in values)
    if missing:
        raise ConfigError(
            "data.partition.by", name, f"{missing} of {len(values)} rows have no value (null, "
            "or an empty or NA cell of a CSV): each client is one value of the column, so "
            "fill those rows in or drop them",
        )  # fmt: skip
    return np.asarray(values, dtype=object)


def data_digest(dataset: Any, groups: np.ndarray | None) -> str:
    """A digest of a converted dataset's arrays (inputs, labels) and each row's
    ``data.partition.by`` value: a resumed run compares it with the run's partition.json,
    so data that changed under a run is refused."""
    import dataclasses
    import hashlib

    digest = hashlib.blake2b(digest_size=16)
    for field in dataclasses.fields(dataset):
        value = getattr(dataset, field.name)
        if isinstance(value, np.ndarray):
            digest.update(f"{field.name}:{value.dtype}:{value.shape}".encode())
            digest.update(np.ascontiguousarray(value).data)
    if groups is not None:
        digest.update("\x1f".join(map(str, groups.tolist())).encode())
    return digest.hexdigest()
