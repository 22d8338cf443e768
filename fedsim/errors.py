"""Errors for bad input: one line naming the key, the value and what is allowed."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """Bad experiment input, raised before any work starts (the CLI exits 2)."""

    def __init__(self, key: str, value: Any, allowed: str) -> None:
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r}: {allowed}")

    def __reduce__(self) -> tuple[type, tuple[str, Any, str]]:
        """Pickled by its fields, so it crosses process and Ray boundaries intact."""
        return (ConfigError, (self.key, self.value, self.allowed))


class ClientFailureError(RuntimeError):
    """Too many clients of a round produced non-finite losses."""
