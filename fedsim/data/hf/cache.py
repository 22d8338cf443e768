"""The converted-dataset cache of ``data.name=hf:...``: convert once, then memory-map.

Converting an Arrow table to fedsim's arrays (decoding every PNG of FEMNIST's 805,263
images, mapping string labels) takes minutes; reading the result back takes a moment. The
first run that passes every check writes its conversion under
``<data.root>/hf-cache/<key>/`` (one ``.npy`` per array, ``meta.json`` for the rest); later
runs read it with ``numpy.load(mmap_mode="r")``, so the driver maps the file instead of
holding a copy, and the Ray pool puts it in the object store once, where every worker reads
it without a copy (a plain ndarray over the mapping: Ray would pickle a ``numpy.memmap``
into each worker as a private copy).

The key is a SHA-256 of what the conversion depends on: the source (for a local path, every
file's relative name, size and modification time; for a Hub id, the loaded split's
fingerprint), the split, the input and label columns, the partition column and
``data.resize``, and this cache's format version. Change any of them and the key changes,
so a stale cache is never read. Nothing is written for a run refused by a check: the
conversion waits (``remember``) until the run that made it is accepted and its folder
exists (``write_pending``, called by ``fedsim.data.hf.accept``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 2  # 2: partition.json's data digest in the cached record
CACHE_DIR = "hf-cache"
_KINDS: dict[str, type] = {}
_pending: dict[Path, tuple[Any, Any, dict[str, Any]]] = {}  # the newest two, as load_hf keeps


def _dataset_kinds() -> dict[str, type]:
    if not _KINDS:
        from fedsim.data.dataset_types import ImageDataset, TabularDataset
        from fedsim.data.hf.instruct import InstructionTokens
        from fedsim.data.hf.text import LabelledTokens
        from fedsim.data.lm_text import TokenDataset
        from fedsim.data.text import TextDataset

        _KINDS.update(image=ImageDataset, tabular=TabularDataset, text=TextDataset,
                      tokens=TokenDataset, labelled_tokens=LabelledTokens,
                      instruction_tokens=InstructionTokens)  # fmt: skip
    return _KINDS


def source_stamp(path: Path) -> list[list[Any]]:
    """(relative name, size, mtime in ns) of every file under a local ``path``, sorted."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    stamp = []
    for file in files:
        stat = file.stat()
        name = file.name if file == path else str(file.relative_to(path))
        stamp.append([name, stat.st_size, stat.st_mtime_ns])
    return stamp


def cache_key(source: Any, stamp: Any) -> str:
    """The cache entry's name for ``source`` (an HFSource) whose data is ``stamp``."""
    described = {
        "format": FORMAT,
        "name": source.name,
        "split": source.split,
        "input_columns": list(source.input_columns),
        "label_column": source.label_column,
        "by": source.by,
        "resize": source.resize,
        "test_split": source.test_split,
        "data": stamp,
    }
    if source.text is not None:  # tokenized (text.py): by which tokenizer, how
        described["text"] = source.text.described()
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:24]


def cache_path(root: str | os.PathLike, key: str) -> Path:
    return Path(root).expanduser() / CACHE_DIR / key


def read(path: Path) -> tuple[Any, Any, dict[str, Any]] | None:
    """(dataset, groups, info) from a cache entry, arrays memory-mapped (None: no entry)."""
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        return None
    meta = json.loads(meta_file.read_text())
    if meta.get("format") != FORMAT:
        return None
    fields = dict(meta["scalars"])
    for name in meta["arrays"]:  # a plain ndarray over the mapping: Ray ships a memmap
        fields[name] = np.asarray(np.load(path / f"{name}.npy", mmap_mode="r"))  # as a copy
    dataset = _dataset_kinds()[meta["kind"]](**fields)
    groups = None
    if meta.get("groups") is not None:
        groups = np.empty(len(meta["groups"]), dtype=object)
        groups[:] = meta["groups"]
    return dataset, groups, meta["info"]


def remember(path: Path, dataset: Any, groups: Any, info: dict[str, Any]) -> None:
    """Hold a fresh conversion until its run is accepted (``write_pending``)."""
    _pending.pop(path, None)
    _pending[path] = (dataset, groups, info)
    while len(_pending) > 2:
        _pending.pop(next(iter(_pending)))


def write_pending(path: Path | None) -> bool:
    """Write the conversion held for ``path`` (its run passed every check); whether it was."""
    held = _pending.pop(path, None) if path is not None else None
    if held is None or (path / "meta.json").is_file():
        return False
    write(path, *held)
    return True


def write(path: Path, dataset: Any, groups: Any, info: dict[str, Any]) -> None:
    """One cache entry, written to a temporary folder first and then renamed into place (a
    reader never sees half an entry; a lost race leaves the other writer's entry)."""
    kind = next(k for k, cls in _dataset_kinds().items() if type(dataset) is cls)
    arrays, scalars = {}, {}
    for field in dataclasses.fields(dataset):
        value = getattr(dataset, field.name)
        if isinstance(value, np.ndarray):
            arrays[field.name] = value
        elif value is not None:
            scalars[field.name] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    try:
        for name, array in arrays.items():
            np.save(staging / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
        meta = {
            "format": FORMAT,
            "kind": kind,
            "arrays": sorted(arrays),
            "scalars": scalars,
            "groups": None if groups is None else [_plain(g) for g in groups],
            "info": info,
        }
        (staging / "meta.json").write_text(json.dumps(meta))
        try:
            staging.rename(path)
        except OSError:  # another run wrote it first: keep theirs
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _plain(value: Any) -> Any:
    """A group id as JSON keeps it (numpy scalars as Python ones)."""
    return value.item() if isinstance(value, np.generic) else value
