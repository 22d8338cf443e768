"""Reading a config: YAML files and dotted ``key=value`` overrides into a nested dict.

Validation of that dict is fedsim/config.py's; every error here is a one-line ConfigError.
"""

from __future__ import annotations

import copy
import errno
import functools
import os
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from fedsim.errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses duplicate keys (plain YAML lets the last one win)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, Hashable) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key) if isinstance(key, Hashable) else None
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


MAX_DOCUMENT_CHARS = 1_000_000  # a config file or override value larger than this is refused
MAX_VALUES = 100_000  # values in a document once its aliases (&a / *a) are expanded


def expanded_size(value: Any, limit: int = MAX_VALUES) -> int:
    """How many values ``value`` holds with every alias expanded (each use counted), counting
    no further than ``limit`` + 1: an alias bomb is measured without being expanded."""
    count, stack = 0, [value]
    while stack and count <= limit:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return count


@functools.lru_cache(maxsize=256)
def _load(text: str) -> tuple[Any, int]:
    """``text`` read as YAML and its expanded size, once per text: a process that reads the
    same config files and overrides again and again (a test session's thousands of
    ``--check`` runs, a search's trials) parses each once (PyYAML's pure-Python loader was
    the largest part of a ``--check`` under a profiler). Errors are not cached: they are
    raised again each time."""
    value = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    return value, expanded_size(value)


def parse_yaml(text: str, key: str) -> Any:
    """YAML text -> value (a new copy each call: the caller may change it); any YAML error
    becomes a one-line ConfigError naming ``key``, and so does a document too large to be a
    config (an alias bomb among them)."""
    if len(text) > MAX_DOCUMENT_CHARS:
        raise ConfigError(key, text, f"too large: at most {MAX_DOCUMENT_CHARS:,} characters")
    try:
        value, size = _load(text)
    except ValueError as err:  # a number beyond Python's digit limit, and the like
        reason = "an integer of more than 4,300 digits" if "digits" in str(err) else str(err)
        raise ConfigError(key, text, f"cannot be read: {reason}") from None
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or err.__class__.__name__
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        detail = " ".join(f"{problem}{where}".split())
        raise ConfigError(key, text, f"not valid YAML ({detail})") from None
    if size > MAX_VALUES:
        raise ConfigError(
            key, text, f"too large: more than {MAX_VALUES:,} values once its aliases are expanded"
        )
    return copy.deepcopy(value)


def parse_override(text: str) -> tuple[str, Any]:
    """``a.b=value`` -> ("a.b", YAML-typed value)."""
    if "=" not in text:
        raise ConfigError("override", text, "expected key=value, e.g. rounds=50")
    key, _, value = text.partition("=")
    key = key.strip()
    if not key or any(not part.isidentifier() for part in key.split(".")):
        raise ConfigError("override", text, "expected dotted.key=value, e.g. client.lr=0.01")
    return key, parse_yaml(value, key) if value.strip() else None


def check_given_once(overrides: list[str]) -> None:
    """ConfigError for a key given twice on a command line (the YAML file refuses duplicate
    keys too): a user's second value would otherwise silently win."""
    given: dict[str, str] = {}
    for text in overrides:
        key, value = parse_override(text)
        if key in given:
            raise ConfigError(key, value, f"given twice ({given[key]}, then {text}); give it once")
        given[key] = text


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Set dotted keys in a nested dict (unknown keys are caught by ``build_dataclass``); a
    later override of the same key wins (the command line refuses that: ``check_given_once``)."""
    for text in overrides:
        key, value = parse_override(text)
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(key, value, f"{part!r} is not a section")
            node = child
        node[parts[-1]] = value
    return raw


def check_not_a_loop(path: Path) -> None:
    """ConfigError naming ``path`` when it is a symlink loop (opening or resolving it would
    raise ELOOP, or pathlib's RuntimeError)."""
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ConfigError(
                "config", str(path), "a symlink loop (its path holds links that lead back to "
                "each other): point it at a YAML file",
            ) from None  # fmt: skip


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML file's top-level mapping; ConfigError if missing, invalid or not a mapping."""
    path = Path(path)
    check_not_a_loop(path)
    if not path.is_file():
        raise ConfigError("config", str(path), "file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            "config", str(path), f"not UTF-8 text (byte {err.start}): save it as UTF-8"
        ) from None
    except OSError as err:
        raise ConfigError("config", str(path), f"cannot be read ({err.strerror})") from None
    try:
        raw = parse_yaml(text, "config") or {}
    except ConfigError as err:
        raise ConfigError("config", str(path), err.allowed) from None
    if not isinstance(raw, dict):
        raise ConfigError("config", str(path), "must be a YAML mapping")
    return raw
