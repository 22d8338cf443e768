"""Checkpoints: a run's full state every ``checkpoint_every`` rounds, and resuming from it.

A checkpoint holds what the next round needs and what the run has shown so far: the server
state, every client's private state, the number of rounds trained, and every round's record
(summary and per-client rows); and the algorithm object, so ``fedsim report`` can redraw the
algorithm's figures from a final checkpoint alone. States are held by contents: a client
state store inside the server state (FedFomo's) pickles its states, not its spill files.

A resumed run hands those records to its sinks again, so ``metrics.jsonl``, ``clients.csv``
and a W&B run show the whole run, then goes on from the next round; cohorts and client seeds
depend only on (seed, round, client), so the result is the run that was never interrupted.

The newest two checkpoints are kept (``<run_dir>/checkpoints/round_<rounds trained>.pt``).
Each is written under a temporary name, loaded back to verify it, and only then renamed and
the older ones deleted, so a crash or a bad write never leaves the run without a good one; a
resume whose newest checkpoint is damaged falls back to the one before it, with a warning.

Loading never runs code from the file: ``torch.load(weights_only=True)`` with an allowlist
of the globals a checkpoint may name: classes defined in fedsim's own state-holding modules
and ``lightning_modules``, numpy's array and dtype reconstruction, and the modules of the
run's algorithm and model when its config names them by import path. Anything else is a
one-line ``ConfigError`` before the file is unpickled. Whether a config may resume a
checkpoint's run is ``checkpoint_resume.check_resumable``.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedsim.checkpoint_allowlist import (
    TRUSTED_PACKAGES,
    allowed_global,
    numpy_dtype_classes,
    plugin_modules,
)
from fedsim.checkpoint_digest import (
    CheckpointUnreadable,
    HashingWriter,
    damage,
    digest_path,
    read_verified,
    write_digest,
)
from fedsim.errors import ConfigError
from fedsim.tracking.base import ClientRow, RoundRecord

FORMAT = 1
KEEP = 2  # checkpoints kept: the newest and the one before it
_NAME = re.compile(r"round_(\d+)\.pt")


@dataclass
class Checkpoint:
    rounds_trained: int  # the next round to run
    config: dict[str, Any]
    state: dict[str, Any]  # the server state
    client_states: dict[int, Any]
    records: list[RoundRecord]  # rounds 0 .. rounds_trained - 1
    algorithm: Any = None  # the run's Algorithm (None in checkpoints written before it was kept)
    deployment: Any = None  # the deployment options' state (fedsim/deployment/driver.py)
    round_kind: Any = None  # the round kind's state (asynchronous: clients in flight, clock)


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def checkpoints(run_dir: str | Path) -> list[Path]:
    """Every checkpoint under ``run_dir/checkpoints``, newest first."""
    found = [p for p in checkpoint_dir(run_dir).glob("round_*.pt") if _NAME.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(_NAME.fullmatch(p.name)[1]), reverse=True)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint under ``run_dir/checkpoints`` (None: there is none)."""
    found = checkpoints(run_dir)
    return found[0] if found else None


def save_checkpoint(run_dir: str | Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint``, verify it loads, keep it and the one before it; returns its path.

    The file is written under a temporary name and loaded back (with the allowlist a resume
    uses) before it replaces anything, so a checkpoint that could not be resumed from fails
    the run now (ConfigError, or CheckpointUnreadable), not its resume later.
    """
    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"round_{checkpoint.rounds_trained:05d}.pt"
    payload = {
        "format": FORMAT,
        "rounds_trained": checkpoint.rounds_trained,
        "config": checkpoint.config,
        "state": checkpoint.state,
        "client_states": checkpoint.client_states,
        "algorithm": checkpoint.algorithm,
        "deployment": checkpoint.deployment,
        "round_kind": checkpoint.round_kind,
        "records": [
            {
                "round": r.round,
                "summary": r.summary,
                "clients": [dataclasses.asdict(c) for c in r.clients],
            }
            for r in checkpoint.records
        ],
    }
    tmp, tmp_digest = path.with_suffix(".tmp"), path.with_suffix(".sha256.tmp")
    try:
        with open(tmp, "wb") as file:
            writer = HashingWriter(file)
            torch.save(payload, writer)
            file.flush()
            os.fsync(file.fileno())
        write_digest(tmp_digest, writer.sha256.hexdigest(), path.name)
        verified = load_checkpoint(tmp, checkpoint.config, digest=tmp_digest)
    except ConfigError as err:  # it holds an object a resume would refuse to load
        _remove(tmp, tmp_digest)
        raise ConfigError(
            "checkpoint_every",
            checkpoint.config.get("checkpoint_every"),
            f"the round-{checkpoint.rounds_trained} checkpoint "
            f"{err.allowed.removeprefix('checkpoint ')}, "
            "so it could not be resumed from; keep such objects out of the algorithm and its "
            "states, or set checkpoint_every=0",
        ) from None
    except BaseException:
        _remove(tmp, tmp_digest)
        raise
    close_stores(verified.state)
    close_stores(verified.client_states)
    os.replace(tmp_digest, digest_path(path))  # the digest first: a .pt never lacks its own
    os.replace(tmp, path)
    # keep the two newest up to this one; any newer ones belong to a run this one replaced
    # (a resume that fell back past a damaged checkpoint)
    older = 0
    for old in checkpoints(run_dir):
        rounds = int(_NAME.fullmatch(old.name)[1])
        if rounds > checkpoint.rounds_trained:
            _remove(old, digest_path(old))
        elif rounds < checkpoint.rounds_trained:
            older += 1
            if older >= KEEP:
                _remove(old, digest_path(old))
    return path


def _remove(*paths: Path) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def close_stores(value: Any) -> None:
    """Close every client state store inside ``value`` (dicts, lists, tuples)."""
    from fedsim.storage import ClientStateStore

    if isinstance(value, ClientStateStore):
        value.close()
    elif isinstance(value, dict):
        for item in value.values():
            close_stores(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            close_stores(item)


def load_checkpoint(
    path: str | Path, config: dict[str, Any] | None = None, *, digest: Path | None = None
) -> Checkpoint:
    """The checkpoint at ``path``, verified against its digest, unpickled without running code.

    ``config``: the run's config (its ``config.yaml``, or the resuming run's), whose algorithm
    and model modules, when named by import path, the checkpoint may reference. ``digest``:
    where its SHA-256 is (default ``<name>.sha256`` beside it). Raises CheckpointUnreadable
    (a damaged file) or ConfigError (it names a global fedsim does not load).
    """
    path = Path(path)
    data = read_verified(path, digest)
    raw = data.getvalue()
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(raw))
    except Exception as err:  # noqa: BLE001 - any failure to read it is damage
        raise CheckpointUnreadable(path, damage(path, raw, err)) from None
    outside = [n for n in names if n.split(".")[0] not in ("numpy", *TRUSTED_PACKAGES)]
    plugins = plugin_modules(config) if outside else []
    allowed = [(allowed_global(name, path, plugins), name) for name in sorted(names)]
    if "numpy.dtype" in names:  # a dtype unpickles into its class (Float32DType...): built too
        allowed += numpy_dtype_classes()
    try:
        with torch.serialization.safe_globals(allowed):
            payload = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001
        raise CheckpointUnreadable(path, damage(path, raw, err)) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointUnreadable(path, f"not a fedsim checkpoint of format {FORMAT}")
    try:
        records = [
            RoundRecord(r["round"], r["summary"], [ClientRow(**c) for c in r["clients"]])
            for r in payload["records"]
        ]
        return Checkpoint(
            payload["rounds_trained"],
            payload["config"],
            payload["state"],
            payload["client_states"],
            records,
            payload.get("algorithm"),
            payload.get("deployment"),
            payload.get("round_kind"),
        )
    except (KeyError, TypeError) as err:
        raise CheckpointUnreadable(
            path, f"incomplete fedsim checkpoint ({_one_line(err)})"
        ) from None


def newest_readable_checkpoint(
    run_dir: str | Path, config: dict[str, Any] | None = None
) -> tuple[Checkpoint | None, Path | None, list[CheckpointUnreadable]]:
    """The newest checkpoint in ``run_dir`` that loads, its path, and the newer ones that did not.

    (None, None, damaged) when none loads. A checkpoint that names a global fedsim does not
    load raises ConfigError at once: it is refused, not skipped.
    """
    damaged: list[CheckpointUnreadable] = []
    for path in checkpoints(run_dir):
        try:
            return load_checkpoint(path, config), path, damaged
        except CheckpointUnreadable as err:
            damaged.append(err)
    return None, None, damaged


def _one_line(err: object, limit: int = 160) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
