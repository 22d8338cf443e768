"""Run folders: where a run goes, whether a folder may hold it (no torch import), and what
a run that raised leaves there.

Checked before anything starts, so a bad ``--out`` is one line and leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from fedsim.config import ExperimentConfig
from fedsim.errors import ConfigError, RunFailed, error_line

TRACEBACK = "traceback.txt"  # in the folder of a run that raised: where it did
# summary.json's status -> how a refusal says it ended
ENDED = {"interrupted": "was interrupted", "stopped": "was stopped"}


def default_run_dir(cfg: ExperimentConfig, runs_root: str | Path = "runs") -> Path:
    """``runs/<name>``, or ``runs/<name>-2``, ``-3``... when that exists (never overwrite)."""
    base = Path(runs_root) / cfg.name
    candidate, suffix = base, 2
    while candidate.exists():
        candidate = base.with_name(f"{base.name}-{suffix}")
        suffix += 1
    return candidate


def check_out_dir(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """ConfigError unless ``run_dir`` can hold this run (raised before anything is written).

    A file in its place or above it, a place this process cannot write (the
    nearest existing folder is not writable, e.g. /proc), or a folder that already holds a run
    (unless the run is resumed or ``overwrite`` clears it), is refused.
    """
    for parent in (run_dir, *run_dir.parents):
        if parent.exists() and not parent.is_dir():
            where = "is a file" if parent == run_dir else f"is inside {parent}, which is a file"
            raise ConfigError("--out", str(run_dir), f"{where}; give a folder")
        if parent.is_symlink() and not parent.exists():  # a loop, or a missing target
            where = "is" if parent == run_dir else f"is inside {parent}, which is"
            raise ConfigError(
                "--out", str(run_dir), f"{where} a symlink that leads nowhere (a loop or a "
                "missing target); give a folder",
            )  # fmt: skip
    existing = next(p for p in (run_dir, *run_dir.parents, Path.cwd()) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK) or _special_filesystem(existing):
        raise ConfigError(
            "--out", str(run_dir), f"cannot be written here ({existing} is not writable)"
        )
    if resume or not run_dir.is_dir() or not any(run_dir.iterdir()):
        return
    if not overwrite:
        raise ConfigError("--out", str(run_dir), f"already holds a run{_run_state(run_dir)}")


def has_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a checkpoint to resume from (fedsim.checkpoint's layout)."""
    return any((run_dir / "checkpoints").glob("round_*.pt"))


def _run_state(run_dir: Path) -> str:
    """How the run in ``run_dir`` ended (its summary.json), then the options that work on it:
    ``--resume`` only where a checkpoint exists."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        summary = None
    summary = summary if isinstance(summary, dict) else {}
    state = ""
    if isinstance(summary.get("status"), str):
        status = summary["status"]
        state = f" that {ENDED.get(status, status)}"
    if isinstance(summary.get("rounds_completed"), int):
        state += f" after {summary['rounds_completed']} completed rounds"
    if has_checkpoint(run_dir):
        more = " and more rounds" if summary.get("status") == "completed" else ""
        return (
            f"{state}: continue it with --resume{more}, pick a new folder, or replace it with "
            "--overwrite"
        )
    return (
        f"{state}; it has no checkpoint to resume from: replace it with --overwrite, or "
        "pick a new folder"
    )


def run_failed(err: BaseException, run_dir: Path) -> RunFailed:
    """The one-line error of a run that raised ``err`` after its folder was made (its
    summary.json says ``failed``); the traceback goes to ``run_dir/traceback.txt``, and the
    line says which options can reuse the folder."""
    import traceback

    (run_dir / TRACEBACK).write_text("".join(traceback.format_exception(err)))
    try:
        done = int(json.loads((run_dir / "summary.json").read_text())["rounds_completed"])
    except (OSError, ValueError, KeyError, TypeError):
        done = None  # the summary could not be written
    where = "the run" if done is None else f"round {done}"
    resume = ", or continue from its checkpoint with --resume" if has_checkpoint(run_dir) else ""
    return RunFailed(
        f"{where} failed: {error_line(err)}; {run_dir} is kept (summary.json: status failed; "
        f"the traceback in {TRACEBACK}): run it again with --overwrite{resume}"
    )


def make_run_dir(run_dir: Path, *, overwrite: bool) -> Path | None:
    """Create ``run_dir`` (clearing it with ``overwrite``); the topmost folder this created."""
    if overwrite and run_dir.is_dir():
        shutil.rmtree(run_dir)
    missing = [p for p in (run_dir, *run_dir.parents) if not p.exists()]
    run_dir.mkdir(parents=True, exist_ok=True)
    return missing[-1] if missing else None


def _special_filesystem(path: Path) -> bool:
    """Whether ``path`` lies on a kernel filesystem (/proc, /sys) that root may "write"."""
    resolved = path.resolve()
    return any(
        resolved == Path(root) or Path(root) in resolved.parents for root in ("/proc", "/sys")
    )


def check_same_data(run_dir: Path, partition: dict) -> None:
    """ConfigError when the data a resumed run reads now differs from what the run started
    on: the digest of an ``hf:`` source's converted rows in ``run_dir/partition.json``
    against ``partition`` (the data as read now). A file replaced or edited under a run would
    otherwise continue its checkpoint on other rows without a word."""
    try:
        saved = _data_record(json.loads((Path(run_dir) / "partition.json").read_text()))
    except (OSError, ValueError):
        return  # no readable record: nothing to compare (a run from before digests)
    now = _data_record(partition)
    if "digest" not in saved or "digest" not in now:
        return
    if saved["digest"] != now["digest"]:
        raise ConfigError(
            "--resume", str(run_dir), f"the data changed since the run started: "
            f"{now.get('source')} now reads as other rows (digest {now['digest'][:12]}, the "
            f"run's {saved['digest'][:12]} in partition.json); resume on the data it started "
            "from, or start a new run (--overwrite or another --out)",
        )  # fmt: skip


def _data_record(partition: object) -> dict:
    """partition.json's record of an ``hf:`` source (``partition.data``), or {}."""
    inner = partition.get("partition") if isinstance(partition, dict) else None
    record = inner.get("data") if isinstance(inner, dict) else None
    return record if isinstance(record, dict) else {}
