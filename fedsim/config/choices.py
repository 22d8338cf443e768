"""Switching a choice on the command line replaces its group of keys, as Hydra's config groups
do: ``fedsim run fedper.yaml algorithm.name=ditto`` drops the file's ``algorithm.*`` keys
(FedPer's ``personal_layers``) before the overrides apply, and says which.

A choice is a key that selects a group: ``algorithm.name`` (the algorithm's own keys),
``model.name`` (``model.*``), ``data.partition.name`` (``data.partition.*``), and every key
another key acts only with (``config/effects.py``: ``compression.kind`` selects
``compression.fraction`` or ``compression.threshold``). Keys given on the same command line
are never dropped, and a choice switched to the value the file already has drops nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

from fedsim.config.effects import DEPENDENT
from fedsim.config.yaml_io import parse_override

# a choice -> the section whose other keys belong to it
GROUPS = {
    "algorithm.name": "algorithm",
    "model.name": "model",
    "data.partition.name": "data.partition",
}


def switch_choices(raw: dict[str, Any], overrides: list[str]) -> list[str]:
    """Drop, in place, the keys of ``raw`` (the file's config) that belong to a choice an
    override switches; the notes that say what was dropped (one per switched choice)."""
    given = dict(parse_override(text) for text in overrides)
    notes = []
    for choice, new in given.items():
        old = _get(raw, choice, _default(choice))
        if old == new or not isinstance(new, (str, bool, int, float)):
            continue
        dropped = _drop_group(raw, choice, given) + _drop_dependents(raw, choice, old, new, given)
        if dropped:
            shown = ", ".join(f"{key}={_show(value)}" for key, value in dropped)
            notes.append(
                f"{choice}={_show(new)} replaces {_show(old)} of the config file, so its "
                f"{shown} {'is' if len(dropped) == 1 else 'are'} dropped (give the new "
                "choice's keys on the command line)"
            )
    return notes


def _drop_group(raw: dict, choice: str, given: dict) -> list[tuple[str, Any]]:
    """The keys of ``choice``'s section in ``raw`` (but the choice and those given)."""
    section = GROUPS.get(choice)
    node = _get(raw, section, None) if section else None
    if not isinstance(node, dict):
        return []
    name = choice.rpartition(".")[2]
    dropped = []
    for key in [k for k in node if k != name]:
        dotted = f"{section}.{key}"
        if dotted not in given and not any(g.startswith(dotted + ".") for g in given):
            dropped.append((dotted, node.pop(key)))
    return dropped


def _drop_dependents(raw: dict, choice: str, old: Any, new: Any, given: dict) -> list[tuple]:
    """The keys of ``raw`` that act only with ``choice``'s ``old`` value, not its ``new``."""
    dropped = []
    for key, enabler, enables, _ in DEPENDENT:
        if enabler != choice or key in given or _get(raw, key, _MISSING) is _MISSING:
            continue
        try:
            switched = enables(old) and not enables(new)
        except Exception:  # noqa: BLE001 - a value of the wrong type: validation says so
            switched = False
        if switched:
            *path, name = key.split(".")
            dropped.append((key, _get(raw, ".".join(path), {}).pop(name)))
    return dropped


_MISSING = object()


def _get(raw: dict, dotted: str, default: Any) -> Any:
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


@functools.cache
def _default(dotted: str) -> Any:
    """The default of a dotted key of ``ExperimentConfig`` (None where there is none)."""
    from fedsim.config.experiment import ExperimentConfig

    cls: Any = ExperimentConfig
    *path, name = dotted.split(".")
    for part in path:
        hint = typing.get_type_hints(cls).get(part)
        if hint is None or not dataclasses.is_dataclass(hint):
            return None
        cls = hint
    field = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if field is None or field.default is dataclasses.MISSING:
        return None
    return field.default


def _show(value: Any) -> str:
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )
