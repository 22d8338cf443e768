"""Runs grouped per method for a figure: one colour and one legend entry per setting (the
whole config but the seed), every seed's line in that colour (the analysis notebook).
Settings are labelled by what differs between them (``setting_labels``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# keys that do not change a run's results: runs differing only in these are one setting
NOT_A_SETTING = ("seed", "name", "runtime", "tracking", "checkpoint_every")


def setting_of(config: dict[str, Any]) -> str:
    """A run's setting: its config without the keys that do not change results."""
    return json.dumps({k: v for k, v in config.items() if k not in NOT_A_SETTING}, sort_keys=True)


def flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys (``client.lr``) and their values."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def setting_labels(configs: list[dict[str, Any]], most: int = 3) -> list[str]:
    """Per config, the keys (dotted) whose values differ among ``configs`` and its values of
    them, ``client.lr=0.005, data.partition.alpha=0.1`` (at most ``most``, then ``+N``);
    keys that do not change results (``NOT_A_SETTING``) are left out; "" where none differ."""
    flats = [{k: v for k, v in flat(c).items() if k.split(".")[0] not in NOT_A_SETTING}
             for c in configs]  # fmt: skip
    keys = sorted({k for f in flats for k in f})
    differing = [k for k in keys if len({json.dumps(f.get(k), sort_keys=True) for f in flats}) > 1]
    labels = []
    for f in flats:
        shown = [f"{k}={f.get(k)}" for k in differing[:most]]
        more = f", +{len(differing) - most}" if len(differing) > most else ""
        labels.append(", ".join(shown) + more)
    return labels


@dataclass(frozen=True)
class RunGroup:
    """The runs of one setting: its legend label, its colour index, its runs (seeds)."""

    label: str
    color: int
    runs: tuple[Any, ...]


def method_groups(runs: list[Any]) -> list[RunGroup]:
    """``runs`` (``load_run``'s) grouped per setting, in first-seen order: the label names
    the algorithm and the seeds (``ditto, seeds 0, 1, 2``); settings of one algorithm are
    told apart by what differs between them (``fedavg (client.lr=0.005), seed 0``)."""
    groups: dict[str, list[Any]] = {}
    for run in runs:
        groups.setdefault(setting_of(run.config), []).append(run)
    algorithms = [_algorithm(g[0]) for g in groups.values()]
    out = []
    for i, members in enumerate(groups.values()):
        label = _algorithm(members[0])
        if algorithms.count(label) > 1:  # two settings of one method: say what differs
            same = [g[0].config for g in groups.values() if _algorithm(g[0]) == label]
            differs = setting_labels(same)[same.index(members[0].config)]
            label = f"{label} ({differs})"
        seeds = sorted({str(r.config.get("seed", "?")) for r in members})
        label += f", seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}"
        out.append(RunGroup(label, i, tuple(members)))
    return out


def _algorithm(run: Any) -> str:
    return str((run.config.get("algorithm") or {}).get("name", "?"))
