"""A config that starts from others: ``base: ../common.yaml`` (or a list), then ``${...}``.

A file's ``base`` (a path relative to the file, or a list of them) is read first, each base
itself possibly starting from others; the bases merge key by key in order, the file's own
keys on top, the command line's overrides last. ``${data.name}``-style interpolation is then
resolved against the whole merged config. Merging and interpolation are OmegaConf's (the
library Hydra builds on), imported only when a config uses either; fedsim's own typed
validation and one-line errors stay (``build.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fedsim.config.choices import switch_choices
from fedsim.config.yaml_io import apply_overrides, check_not_a_loop, read_yaml_mapping
from fedsim.errors import ConfigError

MAX_DEPTH = 16  # bases of bases: a longer chain is a loop or a mistake


def read_composed(path: str | Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The YAML mapping at ``path`` with its ``base`` configs merged under it."""
    path = Path(path)
    check_not_a_loop(path)  # before resolve(), which raises a bare RuntimeError on one
    resolved = path.resolve()
    if resolved in seen:
        chain = " -> ".join(p.name for p in (*seen, resolved))
        raise ConfigError("base", str(path), f"a config cannot start from itself ({chain})")
    if len(seen) >= MAX_DEPTH:
        raise ConfigError("base", str(path), f"more than {MAX_DEPTH} bases deep")
    raw = read_yaml_mapping(path)
    bases = raw.pop("base", None)
    if bases is None:
        return raw
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not all(isinstance(b, str) and b.strip() for b in bases):
        raise ConfigError("base", bases, f"in {path}: a path or a list of paths to YAML configs")
    merged: dict[str, Any] = {}
    for base in bases:
        merged = merge(merged, read_composed(path.parent / base, (*seen, resolved)))
    return merge(merged, raw)


def merge(lower: dict[str, Any], upper: dict[str, Any]) -> dict[str, Any]:
    """``upper`` over ``lower`` key by key (mappings merge, anything else is replaced)."""
    out = dict(lower)
    for key, value in upper.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _has_interpolation(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(_has_interpolation(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_interpolation(v) for v in value)
    return False


def resolve_interpolations(raw: dict[str, Any]) -> dict[str, Any]:
    """``${a.b}`` references resolved against ``raw`` itself (OmegaConf), in one line if not."""
    if not _has_interpolation(raw):
        return raw
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        resolved = OmegaConf.to_container(OmegaConf.create(raw), resolve=True)
    except OmegaConfBaseException as err:
        key = str(getattr(err, "full_key", None) or "config")
        value: Any = raw
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        reason = " ".join(str(err).split("\n")[0].split())
        raise ConfigError(key, value, f"interpolation failed: {reason}") from None
    assert isinstance(resolved, dict)
    return resolved


def load_raw(path: str | Path | None, overrides: list[str] | None = None) -> dict[str, Any]:
    """The config as a plain nested dict: the file (with its bases), the overrides on top,
    interpolations resolved. Not yet validated. An override that switches a choice
    (``algorithm.name=ditto``) first drops the file's keys of the previous one
    (``choices.py``), with a note on stderr."""
    raw = {} if path is None else read_composed(path)
    given = [o for o in overrides or [] if o.split("=", 1)[0].strip() == "base"]
    if given:
        raise ConfigError("base", given[0].partition("=")[2], "only in a config file")
    for note in switch_choices(raw, overrides or []):
        print(f"fedsim: note: {note}", file=sys.stderr)
    return resolve_interpolations(apply_overrides(raw, overrides or []))
