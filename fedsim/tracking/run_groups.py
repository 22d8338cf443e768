"""Runs grouped per method for a figure: one colour and one legend entry per setting (the
whole config but the seed), every seed's line in that colour (the analysis notebook)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# keys that do not change a run's results: runs differing only in these are one setting
NOT_A_SETTING = ("seed", "name", "runtime", "tracking", "checkpoint_every")


def setting_of(config: dict[str, Any]) -> str:
    """A run's setting: its config without the keys that do not change results."""
    return json.dumps({k: v for k, v in config.items() if k not in NOT_A_SETTING}, sort_keys=True)


@dataclass(frozen=True)
class RunGroup:
    """The runs of one setting: its legend label, its colour index, its runs (seeds)."""

    label: str
    color: int
    runs: tuple[Any, ...]


def method_groups(runs: list[Any]) -> list[RunGroup]:
    """``runs`` (``load_run``'s) grouped per setting, in first-seen order: the label names
    the algorithm and the seeds (``ditto, seeds 0, 1, 2``); settings of one algorithm are
    told apart by the run's name."""
    groups: dict[str, list[Any]] = {}
    for run in runs:
        groups.setdefault(setting_of(run.config), []).append(run)
    algorithms = [_algorithm(g[0]) for g in groups.values()]
    out = []
    for i, members in enumerate(groups.values()):
        label = _algorithm(members[0])
        if algorithms.count(label) > 1:  # two settings of one method: say which
            label = f"{members[0].config.get('name', members[0].run_dir.name)} ({label})"
        seeds = sorted({str(r.config.get("seed", "?")) for r in members})
        label += f", seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}"
        out.append(RunGroup(label, i, tuple(members)))
    return out


def _algorithm(run: Any) -> str:
    return str((run.config.get("algorithm") or {}).get("name", "?"))
