"""Range checks declared on the config field they guard: ``x: int = checked(1, pred, text)``.

One mechanism for the experiment config (fedsim/config.py) and every algorithm's ``Params``:
``build_dataclass`` raises a ConfigError saying ``allowed`` unless ``predicate(value)``, and
``fedsim keys`` prints the same ``allowed`` text. No fedsim imports, so an algorithm module
declares its checks without importing the config.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

Check = tuple[typing.Callable[[Any], bool], str]


def checked(
    default: Any = dataclasses.MISSING,
    predicate: typing.Callable[[Any], bool] | None = None,
    allowed: str = "",
    *,
    factory: typing.Callable[[], Any] | None = None,
    doc: str = "",
    group: str = "",
    schedulable: bool = False,
) -> Any:
    """A dataclass field whose range is declared next to it.

    ``build_dataclass`` raises a ConfigError saying ``allowed`` unless ``predicate(value)``;
    a subclass that redeclares the field (a new default) keeps the check. ``factory`` instead
    of ``default`` for a mutable default (``checked(predicate=..., allowed=..., factory=list)``);
    ``doc`` is the description ``fedsim keys`` shows (else the field's ``# comment``);
    ``group`` names the setting under which the key acts (FedVG's validation keys: "with
    algorithm.weighting=fedvg|avg"): listed apart from the algorithm's own keys.
    ``schedulable``: the key may be given as a schedule (``fedsim/schedules.py``): it is read
    afresh every round, so a value that changes between rounds takes effect.
    """
    if predicate is None or not allowed:
        raise TypeError("checked() needs a predicate and the allowed text")
    metadata: dict[str, Any] = {"check": (predicate, allowed)}
    if doc:
        metadata["doc"] = doc
    if group:
        metadata["group"] = group
    if schedulable:
        metadata["schedulable"] = True
    if factory is not None:
        if default is not dataclasses.MISSING:
            raise TypeError("checked() takes a default or a factory, not both")
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def field_check(cls: type, name: str) -> Check | None:
    """The ``checked`` rule of field ``name``: its own, or the nearest base class's."""
    for klass in cls.__mro__:
        declared = getattr(klass, "__dataclass_fields__", {}).get(name)
        if declared is not None and "check" in declared.metadata:
            return declared.metadata["check"]
    return None


def field_group(cls: type, name: str) -> str:
    """The ``group`` of field ``name`` ('' for an algorithm's own keys)."""
    for klass in cls.__mro__:
        declared = getattr(klass, "__dataclass_fields__", {}).get(name)
        if declared is not None and "group" in declared.metadata:
            return declared.metadata["group"]
    return ""


def field_schedulable(cls: type, name: str) -> bool:
    """Whether field ``name`` takes a schedule (declared with ``checked(schedulable=True)``)."""
    for klass in cls.__mro__:
        declared = getattr(klass, "__dataclass_fields__", {}).get(name)
        if declared is not None and "check" in declared.metadata:
            return bool(declared.metadata.get("schedulable"))
    return False


def patterns_or_none(value: Any) -> bool:
    """None, or a non-empty list of non-empty strings (shell patterns of client names)."""
    return value is None or (
        isinstance(value, list) and len(value) > 0 and all(isinstance(p, str) and p for p in value)
    )
