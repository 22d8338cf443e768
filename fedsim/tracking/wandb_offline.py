"""Read an offline W&B run (``.wandb`` file) back: config, history rows, summary, charts.

So tests and users can check what a run will upload before ``wandb sync``. The file is W&B's
record log: 32 KiB blocks of CRC-checked records holding protobuf messages.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_BLOCK = 32768
_HEADER = struct.Struct("<4sHB")  # ident ":W&B", magic 0xBEE1, version
_RECORD = struct.Struct("<IHB")  # crc32, length, type (FULL=1 FIRST=2 MIDDLE=3 LAST=4)


@dataclass
class OfflineRun:
    """What an offline ``.wandb`` file holds: config, history rows (by step), summary, the
    custom charts' panel specs by key (``wandb.plot.line_series`` and the like), group, tags."""

    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    charts: dict[str, Any] = field(default_factory=dict)
    group: str = ""
    tags: list[str] = field(default_factory=list)


def find_wandb_file(path: str | Path) -> Path:
    """The ``.wandb`` file of a run folder, its ``wandb/`` folder or an offline-run folder."""
    path = Path(path)
    if path.is_file():
        return path
    candidates = sorted(path.glob("run-*.wandb"))
    candidates = candidates or sorted(path.glob("offline-run-*/run-*.wandb"))
    candidates = candidates or sorted(path.glob("wandb/offline-run-*/run-*.wandb"))
    candidates = candidates or sorted(path.glob("wandb/run-*/run-*.wandb"))
    if not candidates:
        raise FileNotFoundError(f"no W&B run file (*.wandb) under {path}")
    return candidates[-1]


def iter_records(path: str | Path) -> Any:
    """Yield the protobuf ``Record``s of a ``.wandb`` file (LevelDB log format, 32 KiB blocks)."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    ident, _magic, _version = _HEADER.unpack_from(data, 0)
    if ident != b":W&B":
        raise ValueError(f"{path}: not a W&B run file")
    pos, pending = _HEADER.size, b""
    while pos + _RECORD.size <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _RECORD.size:  # block trailer
            pos += left
            continue
        crc, length, kind = _RECORD.unpack_from(data, pos)
        if length == 0 and kind == 0:
            pos += left  # zero padding up to the next block
            continue
        chunk = data[pos + _RECORD.size : pos + _RECORD.size + length]
        pos += _RECORD.size + length
        if zlib.crc32(bytes([kind]) + chunk) & 0xFFFFFFFF != crc:
            raise ValueError(f"{path}: checksum mismatch at byte {pos}")
        pending += chunk
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def _set_nested(target: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    target[keys[-1]] = value


def _item_keys(item: Any) -> list[str]:
    return list(item.nested_key) if item.nested_key else [item.key]


def read_offline_run(path: str | Path) -> OfflineRun:
    """Config, history (one dict per step, in order) and summary of an offline W&B run."""
    wandb_file = find_wandb_file(path)
    out = OfflineRun(path=wandb_file)
    steps: dict[int, dict[str, Any]] = {}
    for record in iter_records(wandb_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out.group, out.tags = record.run.run_group, list(record.run.tags)
        if kind in ("run", "config"):
            items = record.run.config.update if kind == "run" else record.config.update
            for item in items:
                _set_nested(out.config, _item_keys(item), json.loads(item.value_json))
        elif kind == "history":
            row: dict[str, Any] = {}
            for item in record.history.item:
                _set_nested(row, _item_keys(item), json.loads(item.value_json))
            step = int(row.get("_step", record.history.step.num))
            steps.setdefault(step, {}).update(row)
        elif kind == "summary":
            for item in record.summary.update:
                _set_nested(out.summary, _item_keys(item), json.loads(item.value_json))
    out.history = [steps[s] for s in sorted(steps)]
    out.charts = (out.config.pop("_wandb", None) or {}).get("visualize", {})
    return out
