"""Client state store: private per-client state (personal layers, control variates...).

Owned by the driver, not by workers, so any worker can run any client and a lost worker
loses nothing: a client's state is replaced only after its round succeeded. An algorithm that
keeps many models on the server (FedFomo) keeps them in a store of its own.

States live in memory up to a byte budget; beyond it the least recently used ones are
spilled to one file per client in a private temporary folder (tensors written as raw numpy
buffers, pickle protocol 5), read back on ``get`` and deleted on ``close``. Each file's SHA-256
is kept in memory and checked when it is read back: a spilled state that changed on disk
is a one-line ``CorruptedState`` error, never a silently different client. A round touches
only its cohort, so the cost per round grows with the cohort, not with the registered clients.

A store pickles by contents (every state, read back from disk where spilled), never by file
paths: a checkpoint of a server state that holds a store can be loaded after the run that
wrote it has deleted its spill folder, and unpickles into a working store of the same budget.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import tempfile
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any

from fedsim.errors import RunFailure
from fedsim.sizes import nbytes
from fedsim.wire import to_wire

DEFAULT_MEMORY_FRACTION = 0.25  # of physical memory, when no budget is given


class CorruptedState(RunFailure):
    """A spilled client state whose file no longer matches the digest taken when it was
    written (a disk error, another process)."""


def default_memory_budget() -> int:
    """A quarter of the machine's physical memory (bytes); 4 GiB if it cannot be read."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 4 << 30
    return int(total * DEFAULT_MEMORY_FRACTION)


class ClientStateStore:
    """Map client -> state dict: in memory up to ``memory_budget_bytes``, spilled beyond it.

    ``memory_budget_bytes=None`` uses a quarter of physical memory; 0 keeps nothing in memory.
    ``spill_root`` is where the private spill folder is made (default: the system temp dir).
    """

    def __init__(
        self, memory_budget_bytes: int | None = None, spill_root: str | Path | None = None
    ) -> None:
        if memory_budget_bytes is not None and memory_budget_bytes < 0:
            raise ValueError(f"memory_budget_bytes={memory_budget_bytes}: must be >= 0")
        self.memory_budget_bytes = (
            default_memory_budget() if memory_budget_bytes is None else int(memory_budget_bytes)
        )
        self._spill_root = spill_root
        self._memory: OrderedDict[int, tuple[dict[str, Any], int]] = OrderedDict()
        self._memory_bytes = 0
        self._spilled: dict[int, tuple[Path, str]] = {}  # client -> (file, its SHA-256)
        self._spill_dir: Path | None = None
        self._finalizer: weakref.finalize | None = None

    # --- the mapping API ---
    def get(self, client: int) -> dict[str, Any] | None:
        """The client's state, or None if it has none (read back from disk if spilled)."""
        if client in self._memory:
            self._memory.move_to_end(client)
        return self._read(client)

    def put(self, client: int, state: dict[str, Any]) -> None:
        """Store ``state`` (replacing any older one), then spill the oldest beyond the budget."""
        self._discard(client)
        size = nbytes(state)
        self._memory[client] = (state, size)
        self._memory_bytes += size
        while self._memory_bytes > self.memory_budget_bytes and self._memory:
            self._spill_oldest()

    def __len__(self) -> int:
        return len(self._memory) + len(self._spilled)

    def __contains__(self, client: object) -> bool:
        return client in self._memory or client in self._spilled

    def clients(self) -> list[int]:
        """Every client that has a state, in increasing order."""
        return sorted([*self._memory, *self._spilled])

    # --- accounting ---
    @property
    def memory_bytes(self) -> int:
        """Bytes of tensors/arrays held in memory."""
        return self._memory_bytes

    @property
    def num_spilled(self) -> int:
        """How many clients' states are on disk."""
        return len(self._spilled)

    @property
    def spill_dir(self) -> Path | None:
        """The private spill folder (None until the first spill)."""
        return self._spill_dir

    # --- pickling: by contents ---
    def __getstate__(self) -> dict[str, Any]:
        """The budget and every client's state (spilled ones read back), not the spill files."""
        return {
            "memory_budget_bytes": self.memory_budget_bytes,
            "spill_root": self._spill_root,
            "states": {client: self._read(client) for client in self.clients()},
        }

    def __setstate__(self, saved: dict[str, Any]) -> None:
        """A working store with the same budget; states beyond it spill to a new folder."""
        self.__init__(saved["memory_budget_bytes"], saved["spill_root"])  # type: ignore[misc]
        for client, state in saved["states"].items():
            self.put(client, state)

    # --- lifecycle ---
    def close(self) -> None:
        """Forget every state and delete the spill folder."""
        self._memory.clear()
        self._memory_bytes = 0
        self._spilled.clear()
        if self._finalizer is not None:
            self._finalizer()  # removes the folder once
        self._spill_dir = self._finalizer = None

    def __enter__(self) -> ClientStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals ---
    def _read(self, client: int) -> dict[str, Any] | None:
        """The client's state without touching the recency order."""
        entry = self._memory.get(client)
        if entry is not None:
            return entry[0]
        spilled = self._spilled.get(client)
        if spilled is None:
            return None
        path, digest = spilled
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise CorruptedState(
                f"client {client}'s spilled state {path} changed on disk since it was written "
                "(SHA-256 mismatch); the run cannot go on with it: resume from its last "
                "checkpoint with --resume"
            )
        return pickle.loads(data)

    def _discard(self, client: int) -> None:
        entry = self._memory.pop(client, None)
        if entry is not None:
            self._memory_bytes -= entry[1]
        spilled = self._spilled.pop(client, None)
        if spilled is not None:
            spilled[0].unlink(missing_ok=True)

    def _spill_oldest(self) -> None:
        client, (state, size) = self._memory.popitem(last=False)
        self._memory_bytes -= size
        path = self._ensure_spill_dir() / f"client_{client}.pkl"
        tmp = path.with_suffix(".tmp")
        # Tensors go out as raw numpy buffers and come back as owned, writable tensors.
        data = pickle.dumps(to_wire(state, copy=True), protocol=5)
        tmp.write_bytes(data)
        tmp.replace(path)
        self._spilled[client] = (path, hashlib.sha256(data).hexdigest())

    def _ensure_spill_dir(self) -> Path:
        if self._spill_dir is None:
            root = None if self._spill_root is None else str(self._spill_root)
            self._spill_dir = Path(tempfile.mkdtemp(prefix="fedsim-states-", dir=root))
            # Removed on close(), on garbage collection, or at interpreter exit.
            self._finalizer = weakref.finalize(
                self, shutil.rmtree, str(self._spill_dir), ignore_errors=True
            )
        return self._spill_dir
