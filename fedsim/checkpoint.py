"""Checkpoints: a run's full state every ``checkpoint_every`` rounds, and resuming from it.

A checkpoint holds what the next round needs and what the run has shown so far: the server
state, every client's private state, the number of rounds trained, and every round's record
(summary and per-client rows); and the algorithm object, so ``fedsim report`` can redraw the
algorithm's figures from a final checkpoint alone. States are held by contents: a client
state store inside the server state (FedFomo's) pickles its states, not its spill files.

A resumed run hands those records to its sinks again, so ``metrics.jsonl``, ``clients.csv``
and a W&B run show the whole run, then goes on from the next round; cohorts and client seeds
depend only on (seed, round, client), so the result is the run that was never interrupted.
Only the newest checkpoint is kept
(``<run_dir>/checkpoints/round_<rounds trained>.pt``); it is written under a temporary name
and renamed, so a crash never leaves a half-written one.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedsim.errors import ConfigError
from fedsim.tracking.base import ClientRow, RoundRecord

FORMAT = 1
# Keys a resumed run may change: how long it runs, where it runs, where it reports.
RESUMABLE_CHANGES = ("name", "rounds", "checkpoint_every", "runtime", "tracking")


@dataclass
class Checkpoint:
    rounds_trained: int  # the next round to run
    config: dict[str, Any]
    state: dict[str, Any]  # the server state
    client_states: dict[int, Any]
    records: list[RoundRecord]  # rounds 0 .. rounds_trained - 1
    algorithm: Any = None  # the run's Algorithm (None in checkpoints written before it was kept)


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def save_checkpoint(run_dir: str | Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint`` atomically, then delete the older ones; returns its path."""
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
        "records": [
            {
                "round": r.round,
                "summary": r.summary,
                "clients": [dataclasses.asdict(c) for c in r.clients],
            }
            for r in checkpoint.records
        ],
    }
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    for old in folder.glob("round_*.pt"):
        if old != path:
            old.unlink(missing_ok=True)
    return path


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint under ``run_dir/checkpoints`` (None: there is none)."""
    found = sorted(checkpoint_dir(run_dir).glob("round_*.pt"))
    return found[-1] if found else None


def load_checkpoint(path: str | Path) -> Checkpoint:
    payload = torch.load(path, map_location="cpu", weights_only=False)
    if payload.get("format") != FORMAT:
        raise ConfigError("--resume", str(path), f"not a fedsim checkpoint of format {FORMAT}")
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
    )


def check_resumable(checkpoint: Checkpoint, config: dict[str, Any], path: Path) -> None:
    """Raise ConfigError unless ``config`` continues the checkpoint's run."""
    changed = sorted(
        key
        for key in set(config) | set(checkpoint.config)
        if key not in RESUMABLE_CHANGES and config.get(key) != checkpoint.config.get(key)
    )
    if changed:
        raise ConfigError(
            "--resume",
            str(path),
            f"the config differs from the checkpoint's in {', '.join(changed)}; only "
            f"{', '.join(RESUMABLE_CHANGES)} may change",
        )
    if config["rounds"] < checkpoint.rounds_trained:
        raise ConfigError(
            "rounds",
            config["rounds"],
            f"the checkpoint has {checkpoint.rounds_trained} rounds trained; resume with at "
            "least that many",
        )
