"""A checkpoint's SHA-256, written beside it (``round_00004.sha256``, ``sha256sum`` format),
and what a damaged checkpoint is: a file that does not hash to its digest, or does not load.

A flipped bit anywhere (a tensor, the pickled metadata) changes the digest, so a damaged
checkpoint is refused before anything reads it; resume then falls back to the one before it.
Checkpoints written before fedsim kept digests have none: their zip CRCs are checked instead.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path
from typing import Any


class CheckpointUnreadable(Exception):
    """A checkpoint file that cannot be read back; ``reason`` says why in a few words."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def digest_path(path: Path) -> Path:
    """``round_00004.pt`` -> ``round_00004.sha256``."""
    return path.with_suffix(".sha256")


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class HashingWriter:
    """A binary file that hashes what is written to it (torch.save writes through it), so the
    digest costs no second pass over the bytes."""

    def __init__(self, file: Any) -> None:
        self.file, self.sha256 = file, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


def write_digest(path: Path, hexdigest: str, name: str) -> None:
    """Write ``<hexdigest>  <name>`` to ``path`` (``sha256sum -c`` reads it), fsynced."""
    with open(path, "w") as file:
        file.write(f"{hexdigest}  {name}\n")
        file.flush()
        os.fsync(file.fileno())


def read_verified(path: Path, digest: Path | None = None) -> io.BytesIO:
    """The checkpoint's bytes, checked against its digest (``digest``, default beside it) or,
    lacking one, its zip CRCs. Raises CheckpointUnreadable for a mismatch."""
    try:
        data = path.read_bytes()
    except OSError as err:
        reason = "missing" if not path.is_file() else f"cannot be read ({err.strerror or err})"
        raise CheckpointUnreadable(path, reason) from None
    digest = digest_path(path) if digest is None else digest
    if digest.is_file():
        recorded = digest.read_text(errors="replace").split()[:1]
        if recorded != [sha256_of(data)]:
            broken = structural_damage(data)
            raise CheckpointUnreadable(
                path, broken or f"its bytes do not match {digest.name} (changed since written)"
            )
        return io.BytesIO(data)
    broken = structural_damage(data)
    if broken:
        raise CheckpointUnreadable(path, broken)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        bad = archive.testzip()
    if bad is not None:
        raise CheckpointUnreadable(path, f"no digest, and its zip CRC fails for {bad}")
    return io.BytesIO(data)


def structural_damage(data: bytes) -> str | None:
    """What is visibly wrong with a checkpoint's bytes (None: it is a whole zip archive)."""
    if not data:
        return "empty file"
    if data[:4] != b"PK\x03\x04":
        return f"not a checkpoint file: {len(data)} bytes that are not a torch.save archive"
    if not zipfile.is_zipfile(io.BytesIO(data)):
        return f"truncated at {len(data)} bytes"
    return None


def damage(path: Path, data: bytes, err: BaseException) -> str:
    """Why the checkpoint at ``path`` (whose bytes are ``data``) could not be loaded."""
    broken = structural_damage(data)
    if broken:
        return broken
    text = " ".join(str(err).split())
    text = text if len(text) <= 160 else text[:157] + "..."
    return f"unreadable: {type(err).__name__}: {text}"
