"""Client state store: private per-client state (personal layers, control variates...).

Owned by the driver, not by workers, so any worker can run any client and a lost worker
loses nothing: a client's state is replaced only after its round succeeded.
"""

from __future__ import annotations

from typing import Any


class ClientStateStore:
    """In-memory map client -> state dict."""

    def __init__(self) -> None:
        self._states: dict[int, dict[str, Any]] = {}

    def get(self, client: int) -> dict[str, Any] | None:
        return self._states.get(client)

    def put(self, client: int, state: dict[str, Any]) -> None:
        self._states[client] = state

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, client: int) -> bool:
        return client in self._states
