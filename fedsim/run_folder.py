"""Run folders: where a run goes, and whether a folder may hold it (no torch import).

Checked before anything starts, so a bad ``--out`` is one line and leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from fedsim.config import ExperimentConfig
from fedsim.errors import ConfigError


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
    existing = next(p for p in (run_dir, *run_dir.parents, Path.cwd()) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK) or _special_filesystem(existing):
        raise ConfigError(
            "--out", str(run_dir), f"cannot be written here ({existing} is not writable)"
        )
    if resume or not run_dir.is_dir() or not any(run_dir.iterdir()):
        return
    if not overwrite:
        raise ConfigError(
            "--out",
            str(run_dir),
            "already holds a run: continue it with --resume, pick a new folder, or replace "
            "it with --overwrite",
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
