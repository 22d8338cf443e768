"""Every config key with its type, default, allowed values and description (``fedsim keys``).

Generated from the config dataclasses and each algorithm's ``Params`` so it cannot drift:
the description is the field's ``doc`` metadata, else the comment ending its line in the
source, else the comment lines right above it; the allowed values come from the same
``checked`` declarations (fedsim/checks.py) that validate a config.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import tokenize
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any

from fedsim.algorithm_params import BUILTIN_NAMES, params_class, summaries
from fedsim.checks import field_check, field_group, field_schedulable
from fedsim.config import AlgorithmConfig, ExperimentConfig


@dataclass(frozen=True)
class KeyDoc:
    """One documented key (``group``: the setting it acts under, '' for a section's own)."""

    key: str
    type: str
    default: Any
    allowed: str
    description: str
    group: str = ""


@cache
def _line_comments(cls: type) -> dict[str, str]:
    """field name -> the ``# comment`` ending its line in ``cls``'s source, else the comment
    lines right above it ('' if neither)."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    trailing: dict[int, str] = {}
    above: dict[int, str] = {}  # comment-only lines
    names: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            own_line = tok.line.lstrip().startswith("#")
            (above if own_line else trailing)[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type == tokenize.NAME and tok.start[1] == 4 and tok.start[0] not in names:
            names[tok.start[0]] = tok.string
    out = {}
    for line, name in names.items():
        block, prev = [], line - 1
        while prev in above:
            block.insert(0, above[prev])
            prev -= 1
        out[name] = trailing.get(line) or " ".join(block)
    return out


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _allowed(cls: type, f: dataclasses.Field) -> str:
    """The key's allowed values; a key that takes a schedule says so (fedsim/schedules.py)."""
    check = field_check(cls, f.name)
    text = "" if check is None else check[1]
    if field_schedulable(cls, f.name):
        text += "; or a schedule over rounds"
    return text


def _description(cls: type, f: dataclasses.Field) -> str:
    """The field's ``doc`` metadata, else its line comment in the nearest class declaring one."""
    for klass in cls.__mro__:
        declared = getattr(klass, "__dataclass_fields__", {}).get(f.name)
        if declared is None:
            continue
        text = (declared.metadata or {}).get("doc") or _line_comments(klass).get(f.name, "")
        if text:
            return text
    return ""


def _type_text(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        inner = [_type_text(a) for a in args if a is not type(None)]
        return " | ".join(inner) + (" | null" if type(None) in args else "")
    if origin is list:
        return f"list[{', '.join(_type_text(a) for a in typing.get_args(tp))}]"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def dataclass_keys(cls: type, prefix: str = "") -> list[KeyDoc]:
    """Every leaf key of dataclass ``cls`` (nested dataclasses flattened with dots)."""
    hints = typing.get_type_hints(cls)
    docs: list[KeyDoc] = []
    for f in dataclasses.fields(cls):
        key, tp = f"{prefix}{f.name}", hints[f.name]
        if dataclasses.is_dataclass(tp):
            docs.extend(dataclass_keys(tp, f"{key}."))
            continue
        if f.name == "params" and cls is AlgorithmConfig:
            continue  # the chosen algorithm's own keys, listed per algorithm
        docs.append(
            KeyDoc(
                key, _type_text(tp), _default(f), _allowed(cls, f), _description(cls, f),
                field_group(cls, f.name),
            )
        )  # fmt: skip
    return docs


def experiment_keys() -> list[KeyDoc]:
    """The keys every experiment has (algorithm-specific keys excluded)."""
    return dataclass_keys(ExperimentConfig)


def algorithm_keys(name: str) -> list[KeyDoc]:
    """``algorithm.<key>`` of algorithm ``name`` (its Params dataclass; no torch imported)."""
    return dataclass_keys(params_class(name), "algorithm.")


def algorithm_names() -> list[str]:
    """fedsim's own algorithms' config names (a plug-in's keys: ``fedsim keys module:Class``)."""
    return sorted(BUILTIN_NAMES)


def all_keys() -> dict[str, list[KeyDoc]]:
    """Section name -> its keys: ``experiment`` and one entry per algorithm."""
    return {"experiment": experiment_keys(), **{n: algorithm_keys(n) for n in algorithm_names()}}


def own_keys(name: str) -> tuple[list[KeyDoc], list[KeyDoc]]:
    """(the algorithm's own keys, those of a setting it does not use by default): FedAvg's
    FedVG validation keys act only with ``weighting=fedvg|avg``; FedVG's are its own."""
    keys = algorithm_keys(name)
    active = _default_weighting(name) in ("fedvg", "avg")
    own = [k for k in keys if not k.group or active]
    return own, [k for k in keys if k not in own]


def _default_weighting(name: str) -> Any:
    return getattr(params_class(name), "weighting", None)


def select(section: str | None) -> list[KeyDoc]:
    """Keys under ``section``: ``experiment`` (every key but the algorithms'), a dotted
    prefix (``data``, ``runtime``), or an algorithm name (its own keys).

    ConfigError (one line) when nothing matches.
    """
    from fedsim.errors import ConfigError

    if section in (None, "experiment"):
        return experiment_keys()
    names = algorithm_names()
    name = section.removeprefix("algorithm.")
    if name in names or ":" in name:  # a built-in, or a plug-in named by import path
        return own_keys(name)[0]
    found = [k for k in experiment_keys() if k.key == section or k.key.startswith(f"{section}.")]
    if not found:
        sections = sorted({k.key.split(".")[0] for k in experiment_keys() if "." in k.key})
        raise ConfigError(
            "section",
            section,
            f"allowed: experiment, {', '.join(sections)}, or an algorithm: {', '.join(names)}",
        )
    return found


def overview() -> str:
    """``fedsim keys`` without a section: the names a config can pick, one line each."""
    from fedsim.data.names import SUMMARIES as DATASETS
    from lightning_modules.registry import SUMMARIES as MODELS

    sections = sorted({k.key.split(".")[0] for k in experiment_keys() if "." in k.key})
    parts = [
        ("algorithm.name (fedsim keys ALGORITHM: its keys)", summaries()),
        ("model.name", MODELS),
        ("data.name", DATASETS),
    ]
    lines = []
    for title, names in parts:
        width = max(map(len, names))
        lines += [title] + [f"  {n:<{width}}  {text}" for n, text in names.items()] + [""]
    lines.append(
        f"keys: fedsim keys experiment (all), or a section: {', '.join(sections)}; "
        "module:Class or module:function of your own works for each name"
    )
    return "\n".join(lines)


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def render_text(keys: list[KeyDoc]) -> str:
    """Aligned plain-text lines: key, type, default, allowed values, description."""
    rows = [(k.key, k.type, _show(k.default), k.allowed, k.description) for k in keys]
    widths = [max(len(r[i]) for r in rows) for i in range(3)] if rows else [0, 0, 0]
    lines = []
    for key, tp, default, allowed, description in rows:
        text = f"{key:<{widths[0]}}  {tp:<{widths[1]}}  {default:<{widths[2]}}"
        notes = "; ".join(part for part in (allowed, description) if part)
        lines.append(f"{text}  {notes}".rstrip())
    return "\n".join(lines)


def render_markdown(keys: list[KeyDoc]) -> str:
    """A Markdown table of ``keys`` (the README's key tables are made with this)."""
    out = ["| key | type | default | allowed | what it is |", "|---|---|---|---|---|"]
    for k in keys:
        cells = [f"`{k.key}`", k.type, f"`{_show(k.default)}`", k.allowed, k.description]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out)
