"""The allowed key nearest a mistyped one, for an unknown key's error ("did you mean
client.lr?"): in the key's own section first, else the same name in another section."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing


def dotted_keys(cls: type, prefix: str = "") -> list[str]:
    """Every dotted key of the dataclass ``cls``, its sections' keys included (``client.lr``)."""
    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        keys.append(prefix + f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            keys += dotted_keys(hints[f.name], f"{prefix}{f.name}.")
    return keys


@functools.cache
def _experiment_keys() -> tuple[str, ...]:
    """The experiment's dotted keys, but the algorithm's own (they depend on algorithm.name)."""
    from fedsim.config.experiment import ExperimentConfig

    keys = dotted_keys(ExperimentConfig)
    return tuple(k for k in keys if not k.startswith("algorithm.") or k == "algorithm.name")


def closest_key(given: str, section: list[str]) -> str | None:
    """The allowed key nearest ``given`` (dotted): a close name among ``section`` (the keys
    beside it: ``client.lrr`` -> ``client.lr``), else its exact name in one other section
    (``algorithm.lr`` -> ``client.lr``); None when nothing is near."""
    prefix, _, name = given.rpartition(".")
    near = difflib.get_close_matches(name, section, n=1)
    if near:
        return f"{prefix}.{near[0]}" if prefix else near[0]
    elsewhere = [k for k in _experiment_keys() if k.rpartition(".")[2] == name and k != given]
    return elsewhere[0] if len(elsewhere) == 1 else None


def foreign_algorithm_key(given: str) -> str | None:
    """For ``algorithm.<key>`` unknown to the algorithm being configured but a key of other
    built-in algorithms: ``a key of fedper, not of ditto``; else None."""
    from fedsim.algorithm_params import PARAMS
    from fedsim.algorithm_params.base import configured_name

    prefix, _, name = given.rpartition(".")
    current = configured_name("")
    if prefix != "algorithm" or not current:
        return None
    owners = sorted(
        n
        for n, p in PARAMS.items()
        if n != current and name in {f.name for f in dataclasses.fields(p)}
    )
    if not owners:
        return None
    shown = ", ".join(owners[:4]) + (f" and {len(owners) - 4} more" if len(owners) > 4 else "")
    return f"a key of {shown}, not of {current}"
