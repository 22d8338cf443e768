"""Errors for bad input: one line naming the key, the value and what is allowed."""

from __future__ import annotations

from typing import Any

# a value longer than this is cut in the message (the error stays one line); long enough for
# a cluster's file paths, which a user must see whole to find the file
SHOWN_CHARS = 300


def show_value(value: Any) -> str:
    """A config value as the user wrote it in YAML: null, true/false, 'text', numbers; cut
    after ``SHOWN_CHARS`` characters."""
    if value is None:
        text = "null"
    elif value is True or value is False:
        text = "true" if value else "false"
    elif isinstance(value, int):
        digits = str(value) if value.bit_length() < 4000 else f"{value.bit_length()}-bit integer"
        text = digits
    else:
        text = repr(value)
    if len(text) > SHOWN_CHARS:
        text = f"{text[: SHOWN_CHARS - 3]}... ({len(text):,} characters)"
    return text


class ConfigError(ValueError):
    """Bad experiment input, raised before any work starts (the CLI exits 2)."""

    def __init__(self, key: str, value: Any, allowed: str) -> None:
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={show_value(value)}: {allowed}")

    def __reduce__(self) -> tuple[type, tuple[str, Any, str]]:
        """Pickled by its fields, so it crosses process and Ray boundaries intact."""
        return (ConfigError, (self.key, self.value, self.allowed))


class RunFailure(RuntimeError):
    """A run that cannot go on (the CLI prints it in one line and exits 1)."""


class RunFailed(RunFailure):
    """A run that raised mid-way: its folder is kept, its summary.json says ``failed``."""


class ClientFailureError(RunFailure):
    """Too many clients of a round produced non-finite losses."""


ERROR_LINE_CHARS = 500  # a longer exception message is cut in error_line


def error_line(err: BaseException) -> str:
    """``Type: message`` of an exception in one line (summary.json's ``error``); a Ray task's
    error is its cause's (``cause``), without the remote traceback Ray puts in its message."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException):
        err = cause
    message = " ".join(str(err).split())
    if len(message) > ERROR_LINE_CHARS:
        message = f"{message[: ERROR_LINE_CHARS - 3]}..."
    return f"{type(err).__name__}: {message}" if message else type(err).__name__
