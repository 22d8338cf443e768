"""``data.name=hf:<local path>``: a Hugging Face ``datasets`` folder (``save_to_disk``) or
parquet / CSV / JSON files, read once into fedsim's in-memory datasets: images (grey or
colour, for the CNNs), numeric feature columns (tabular, for ``mlp``), character windows
(``char_lstm``) or a text column tokenized for a pretrained language model (``text.py``).

String labels become ids (sorted names; the map goes to partition.json); a
``data.partition.by`` column is read too, for natural clients (one per value).
"""

from __future__ import annotations

import functools
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.data import lm_text
from fedsim.data.dataset_types import Dataset, ImageDataset, TabularDataset
from fedsim.data.hf import cache as hf_cache
from fedsim.data.hf import instruct as hf_instruct
from fedsim.data.hf import text as hf_text
from fedsim.data.hf.columns import (
    arrow_column,
    data_digest,
    group_values,
    label_ids,
    numeric_columns,
    vector_column,
)
from fedsim.data.hf.images import pil_array, stack_images
from fedsim.data.hf.open import HFSource, open_split, with_test_split
from fedsim.data.names import HF_PREFIX
from fedsim.errors import ConfigError


@dataclass(frozen=True)
class HFData:
    """The dataset, each sample's ``data.partition.by`` value (None without one), and what
    partition.json records (source, columns, label names)."""

    dataset: Dataset
    groups: np.ndarray | None
    info: dict[str, Any]
    entry: Path | None = None  # where its conversion is (or will be) cached

    @property
    def train_rows(self) -> int | None:
        """With ``data.test_split``: the rows before this one are data.split's."""
        return self.info.get("train_rows")


def hf_source(data: Any, model: Any = None) -> HFSource:
    """The HFSource a config's ``data`` section names (``data.partition.by`` is read only
    for ``data.partition.name=natural``; config/effects.py refuses it otherwise); ``model``
    (its ``model`` section) says whether a text column is tokenized, and how."""
    by = data.partition.by if data.partition.name == "natural" else None
    spec = None if model is None else hf_text.text_spec(data, model)
    columns = data.input_column
    if spec is not None and spec.prompt_column is not None:  # instruction data: the pair
        columns = [spec.prompt_column, spec.response_column]
    return HFSource(
        data.name,
        data.split,
        (columns,) if isinstance(columns, str) else tuple(columns),
        data.label_column,
        by,
        data.resize,
        data.test_split if by is not None else None,
        spec,
    )


def is_hf_name(name: str) -> bool:
    """Whether ``data.name`` names a Hugging Face dataset (``hf:<path>``)."""
    return name.startswith(HF_PREFIX) and len(name) > len(HF_PREFIX)


def load_hf(source: HFSource, cache_root: str | None = None) -> HFData:
    """Read ``source`` into memory (see ``_load_hf``), once per version of its files in a
    process: a file changed since (a notebook's second run) is read again."""
    stamp = json.dumps(hf_cache.source_stamp(source.path)) if source.path.exists() else None
    return _load_hf(source, cache_root, stamp)


load_hf.cache_clear = lambda: _load_hf.cache_clear()  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=2)
def _load_hf(source: HFSource, cache_root: str | None, stamp: str | None) -> HFData:
    """Read ``source`` into memory (raises a one-line ConfigError on bad input).

    With ``cache_root`` (``data.root``), a conversion cached there is memory-mapped instead,
    and a fresh one is cached once the run is accepted (``cache.py``). Nothing else is
    left on disk for a local path: ``datasets``' cache for parquet/CSV lives in a temporary
    folder (a Hub id, online only, goes to datasets' own cache)."""
    local, entry = source.path.exists(), None
    if cache_root is not None and local:
        stamp = hf_cache.source_stamp(source.path)
        entry = hf_cache.cache_path(cache_root, hf_cache.cache_key(source, stamp))
        if (hit := hf_cache.read(entry)) is not None:
            return HFData(*hit, entry)
    with tempfile.TemporaryDirectory(prefix="fedsim-hf-") as cache:
        table = open_split(source, cache)
        train_rows = None
        if source.test_split is not None:  # the data's own test rows, after the train rows
            table, train_rows = with_test_split(source, table, cache)
        if cache_root is not None and not local:  # a Hub split: datasets' own fingerprint
            key = hf_cache.cache_key(source, getattr(table, "_fingerprint", None))
            entry = hf_cache.cache_path(cache_root, key)
            if (hit := hf_cache.read(entry)) is not None:
                return HFData(*hit, entry)
        dataset, groups, info = convert(source, table, train_rows)
    if entry is not None:
        hf_cache.remember(entry, dataset, groups, info)
    return HFData(dataset, groups, info, entry)


def accept(data: Any, model: Any = None) -> None:
    """The run of config sections ``data`` and ``model`` passed every check: cache its
    conversion (a no-op for other data, or when it was read from the cache)."""
    if is_hf_name(data.name):
        hf_cache.write_pending(load_hf(hf_source(data, model), data.root).entry)
    lm_text.accept(data)  # data.name=shakespeare-lm: its tokens


def convert(
    source: HFSource, table: Any, train_rows: int | None = None
) -> tuple[Dataset, np.ndarray | None, dict[str, Any]]:
    """(dataset, each sample's ``data.partition.by`` value, partition.json's record) of an
    Arrow table (``train_rows``: the rows of data.split before data.test_split's): the slow
    part that the cache saves."""
    _check_columns(source, table.column_names)
    groups = None if source.by is None else group_values(table, source.by)
    if source.text is not None:
        return _tokenized(source, table, groups, train_rows)
    if _is_text(table.features[source.input_columns[0]], source):
        dataset, label_names = _text(source, table)
    else:
        labels, label_names = _labels(source, table)
        dataset = _inputs(source, table, labels, len(label_names))
    if source.resize is not None and not isinstance(dataset, ImageDataset):
        kind = "text" if _is_text(table.features[source.input_columns[0]], source) else "tabular"
        raise ConfigError(
            "data.resize", source.resize, f"acts only on images, and data.input_column="
            f"{','.join(source.input_columns)} holds {kind} rows: nothing would read it; "
            "remove it",
        )  # fmt: skip
    return dataset, groups, _info(source, dataset, groups, label_names, train_rows)


def _info(
    source: HFSource, dataset: Dataset, groups: np.ndarray | None, label_names: list[str],
    train_rows: int | None,
) -> dict[str, Any]:  # fmt: skip
    """partition.json's record of a conversion."""
    info: dict[str, Any] = {
        "source": source.name,
        "split": source.split,
        "input_columns": list(source.input_columns),
        "label_column": source.label_column,
        "label_names": label_names,
        "digest": data_digest(dataset, groups),  # a resume refuses data that changed
    }
    if train_rows is not None:
        info.update(test_split=source.test_split, train_rows=train_rows)
    return info


def _tokenized(
    source: HFSource, table: Any, groups: np.ndarray | None, train_rows: int | None
) -> tuple[Dataset, np.ndarray | None, dict[str, Any]]:
    """A text column tokenized for a pretrained language model (``text.py``)."""
    spec = source.text
    if spec.prompt_column is not None:  # prompt / response pairs (instruct.py)
        pairs, groups, train_rows = hf_instruct.tokenize_pairs(
            spec, source.name, table, groups, train_rows
        )
        info = _info(source, pairs, groups, [], train_rows)
        info["tokenized"] = {"tokenizer": spec.source, "max_length": spec.max_length,
                             "task": "instruction"}  # fmt: skip
        return pairs, groups, info
    column = source.input_columns[0]
    feature = table.features[column]
    if len(source.input_columns) != 1 or getattr(feature, "dtype", None) not in (
        "string", "large_string"
    ):  # fmt: skip
        kind = "several columns" if len(source.input_columns) != 1 else f"{feature}"
        hf_text.refuse_non_text(spec, ",".join(source.input_columns), kind)
    labels, label_names = None, []
    if spec.task == hf_text.CLASSIFY:
        labels, label_names = _labels(source, table)
    dataset, groups, train_rows = hf_text.tokenize_table(
        spec, source.name, table, column, labels, len(label_names), groups, train_rows
    )
    info = _info(source, dataset, groups, label_names, train_rows)
    info["tokenized"] = {"tokenizer": spec.source, "max_length": spec.max_length,
                         "packing": spec.packing, "task": spec.task}  # fmt: skip
    return dataset, groups, info


def _is_text(feature: Any, source: HFSource) -> bool:
    """One string input column: character windows (Shakespeare's x), the char_lstm task."""
    dtype = getattr(feature, "dtype", None)
    return len(source.input_columns) == 1 and dtype in ("string", "large_string")


def _text(source: HFSource, table: Any) -> tuple[Dataset, list[str]]:
    """Rows of one-length character windows and their next character (flwrlabs/shakespeare's
    x and y) as a TextDataset over LEAF's vocabulary (its 80 characters are the classes)."""
    from fedsim.data.text import ALL_LETTERS, NUM_LETTERS, TextDataset, encode

    column = source.input_columns[0]
    windows, targets = list(table[column]), list(table[source.label_column])
    lengths = sorted({len(w) for w in windows})
    if len(lengths) != 1 or lengths[0] < 1:
        raise ConfigError(
            "data.input_column", column, f"text rows of {lengths[:4]} characters: the windows "
            "of a text column must have one length (Shakespeare's x: 80)",
        )  # fmt: skip
    if not all(isinstance(t, str) and len(t) == 1 for t in targets):
        raise ConfigError(
            "data.label_column", source.label_column, f"holds {_first_not_char(targets)!r}: a "
            "text input's label is the one character that follows its window",
        )  # fmt: skip
    starts = np.arange(len(windows), dtype=np.int64) * lengths[0]
    labels = encode("".join(targets)).astype(np.int64)
    dataset = TextDataset(
        source.name, encode("".join(windows)), starts, labels, NUM_LETTERS, lengths[0]
    )
    return dataset, list(ALL_LETTERS)


def _first_not_char(values: list[Any]) -> Any:
    return next((v for v in values if not (isinstance(v, str) and len(v) == 1)), None)


def _check_columns(source: HFSource, columns: list[str]) -> None:
    listed = f"no such column; the columns are: {', '.join(columns)}"
    keys = ["data.input_column"] * len(source.input_columns)
    if source.text is not None and source.text.prompt_column is not None:
        keys = ["data.prompt_column", "data.response_column"]
    for key, column in zip(keys, source.input_columns, strict=True):
        if column not in columns:
            raise ConfigError(key, column, listed)
    next_token = source.text is not None and source.text.task == hf_text.NEXT_TOKEN
    if source.label_column not in columns and not next_token:  # predicting: no labels
        raise ConfigError("data.label_column", source.label_column, listed)
    if source.by is not None and source.by not in columns:
        raise ConfigError("data.partition.by", source.by, listed)
    if source.label_column in source.input_columns and not next_token:
        raise ConfigError(
            "data.input_column", source.label_column, "is data.label_column: inputs must not "
            "hold the label",
        )  # fmt: skip


def _labels(source: HFSource, table: Any) -> tuple[np.ndarray, list[str]]:
    """int64 class ids and the class names (ClassLabel names, sorted strings, False/True for
    a binary attribute, or str(id))."""
    import datasets

    feature = table.features[source.label_column]
    if isinstance(feature, datasets.ClassLabel):
        ids = arrow_column(table, source.label_column).to_numpy(zero_copy_only=False)
        return np.asarray(ids, dtype=np.int64), list(feature.names)
    read = label_ids(table, source.label_column)  # column-wise: booleans, strings, numbers
    if read is not None:
        return read
    values = list(table[source.label_column])
    not_classes = ConfigError(
        "data.label_column",
        source.label_column,
        f"holds {_first_bad(values)!r}, not a class: labels must be integers >= 0, strings "
        "or true/false",
    )
    if values and all(isinstance(v, (bool, np.bool_)) for v in values):  # CelebA's Smiling
        return np.asarray(values, dtype=np.int64), ["False", "True"]
    if values and all(isinstance(v, str) for v in values):
        names = sorted(set(values))
        index = {name: i for i, name in enumerate(names)}
        return np.asarray([index[v] for v in values], dtype=np.int64), names
    if not all(_is_class_id(v) for v in values):
        raise not_classes
    labels = np.asarray(values, dtype=np.float64).astype(np.int64)
    num_classes = int(labels.max()) + 1 if len(labels) else 0
    return labels, [str(i) for i in range(num_classes)]


def _is_class_id(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    return float(value).is_integer() and value >= 0


def _first_bad(values: list[Any]) -> Any:
    return next((v for v in values if not _is_class_id(v)), values[0] if values else None)


def _inputs(source: HFSource, table: Any, labels: np.ndarray, num_classes: int) -> Dataset:
    """An ImageDataset (an Image column, or one column of 2-D/3-D arrays) or a
    TabularDataset (numeric columns, or one column of 1-D arrays)."""
    import datasets

    name = source.name
    columns = source.input_columns
    feature = table.features[columns[0]]
    if len(columns) == 1 and isinstance(feature, datasets.Image):
        images = stack_images(source, [pil_array(img) for img in table[columns[0]]])
        return ImageDataset(name, images, labels, num_classes)
    arrays = isinstance(feature, (datasets.List, datasets.Sequence))
    vectors = arrays and isinstance(getattr(feature, "feature", None), datasets.Value)
    if len(columns) == 1 and vectors:
        rows = vector_column(table, columns[0])  # 1-D arrays of numbers, column-wise
        return TabularDataset(name, _numeric(source, columns[0], rows), labels, num_classes)
    if len(columns) == 1 and (arrays or type(feature).__name__.startswith("Array")):
        rows = [np.asarray(v) for v in table[columns[0]]]
        if rows and rows[0].ndim >= 2:
            return ImageDataset(name, stack_images(source, rows), labels, num_classes)
        return TabularDataset(name, _numeric(source, columns[0], rows), labels, num_classes)
    for column in columns:
        value = table.features[column]
        if not isinstance(value, datasets.Value) or value.dtype in ("string", "large_string"):
            raise ConfigError(
                "data.input_column", column, f"is {value}, not numeric: allowed: an image "
                "column, a column of arrays, or numeric columns (tabular)",
            )  # fmt: skip
    rows = numeric_columns(table, columns)  # column-wise from Arrow
    return TabularDataset(name, _numeric(source, ",".join(columns), rows), labels, num_classes)


def _numeric(source: HFSource, column: str, rows: Any) -> np.ndarray:
    try:
        features = np.asarray(rows, dtype=np.float32)
    except (TypeError, ValueError):
        raise ConfigError(
            "data.input_column", column, "rows are not numbers of one length each"
        ) from None
    if features.ndim != 2 or not np.isfinite(features).all():
        raise ConfigError(
            "data.input_column", column, "rows must be finite numbers, the same count each"
        )
    return np.ascontiguousarray(features)
