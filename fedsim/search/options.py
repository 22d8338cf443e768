"""A search's options, each spelled once: a field of ``TuneOptions``.

The same field is the ``tune:`` key of a config file, the ``--dashed-name`` of ``fedsim tune``
(generated from the field) and the keyword of ``run_tune``; command-line values win over the
file, the file over the defaults. Booleans get ``--name`` / ``--no-name``.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fedsim.config import build_dataclass
from fedsim.errors import ConfigError
from fedsim.metrics import SUMMARY_KEYS, VAL_PREFIX
from fedsim.search.resources import TRIAL_EXECUTORS

# val/*: the same figures on the clients' validation splits (eval.validation_ratio): what a
# search should rank trials by, so that the test split chooses nothing
METRICS = (*SUMMARY_KEYS, *(VAL_PREFIX + k for k in SUMMARY_KEYS), "train_loss")
SCHEDULERS = ("asha", "fifo", "pbt")
SEARCH_ALGS = ("random", "optuna")
AT_LEAST_1 = (lambda v: v >= 1, "must be >= 1")
NONE_OR_AT_LEAST_1 = (lambda v: v is None or v >= 1, "must be >= 1 (or null: no limit)")
ABOVE_1 = (lambda v: v > 1, "must be > 1")


def option(
    default: Any,
    help: str,
    choices: tuple[str, ...] = (),
    check: tuple[Callable[[Any], bool], str] | None = None,
) -> Any:
    """A TuneOptions field: its default, help text and what values are allowed."""
    if choices:
        check = (lambda v: v in choices, f"allowed: {', '.join(choices)}")
    return field(default=default, metadata={"help": help, "choices": choices, "check": check})


@dataclass
class TuneOptions:
    """Everything ``fedsim tune`` takes besides the config and its overrides."""

    search: dict[str, str] = field(
        default_factory=dict,
        metadata={"help": "KEY=SPACE, e.g. client.lr='loguniform(1e-3,0.1)' (repeatable)"},
    )
    samples: int = option(8, "trials (grid: repeats of the grid)", check=AT_LEAST_1)
    scheduler: str = option(
        "asha",
        "asha stops bad trials early; pbt (Population Based Training) restarts bad trials "
        "from better ones' checkpoints with mutated searched values",
        SCHEDULERS,
    )
    search_alg: str = option(
        "random",
        "random: Tune's sampling (grid() expanded); optuna: TPE (pip install 'fedsim-pfl[optuna]')",
        SEARCH_ALGS,
    )
    metric: str = option("acc_weighted", "what trials are ranked by", METRICS)
    mode: str = option("max", "maximize or minimize the metric", ("max", "min"))
    grace_period: int = option(
        1, "ASHA: evaluations before a trial can be stopped", check=AT_LEAST_1
    )
    reduction_factor: float = option(
        2.0, "ASHA: keep the best 1/reduction_factor at each rung", check=ABOVE_1
    )
    perturbation_interval: int = option(
        2, "PBT: evaluations between a trial's exploit/explore steps", check=AT_LEAST_1
    )
    pbt_synch: bool = option(
        False,
        "PBT: every trial waits for the others at each perturbation, so the exploits are "
        "the same in every run (each wait pauses and restores a trial from its checkpoint)",
    )
    max_concurrent: int | None = option(
        None, "trials at once (null: as many as fit)", check=NONE_OR_AT_LEAST_1
    )
    trial_executor: str = option(
        "auto", "executor inside each trial (auto: ray with GPUs)", TRIAL_EXECUTORS
    )
    out: str | None = option(None, "output folder (null: runs/<name>-tune-<time>)")
    address: str | None = option(None, "Ray cluster (null: RAY_ADDRESS, else a local Ray)")
    report: bool = option(True, "draw each trial's report plots")
    quiet: bool = option(False, "no Tune progress output")


NAMES = tuple(f.name for f in dataclasses.fields(TuneOptions))


def flag(name: str) -> str:
    """``max_concurrent`` -> ``--max-concurrent``."""
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``fedsim tune`` arguments: the config, overrides and one flag per TuneOptions field."""
    parser.add_argument(
        "config", nargs="?", help="YAML experiment config (may hold a tune: section)"
    )
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. rounds=20")
    parser.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the interrupted search in DIR (its --out) as it was started; "
        "only --address and --quiet may be given with it",
    )
    hints = typing.get_type_hints(TuneOptions)
    for f in dataclasses.fields(TuneOptions):
        help_text = f"{f.metadata['help']}"
        if f.name == "search":
            parser.add_argument(
                "--search", action="append", nargs="+", metavar="KEY=SPACE", help=help_text
            )
            continue
        if f.metadata["choices"]:
            help_text += f"; {' | '.join(f.metadata['choices'])}"
        if f.default is not None:
            help_text += f" (default {f.default})"
        tp = hints[f.name]
        if tp is bool:
            parser.add_argument(flag(f.name), action=argparse.BooleanOptionalAction, help=help_text)
        else:
            inner = [a for a in typing.get_args(tp) if a is not type(None)]
            parser.add_argument(flag(f.name), type=inner[0] if inner else tp, help=help_text)


def resolve_options(section: Any, given: dict[str, Any]) -> TuneOptions:
    """Defaults, then the YAML ``tune:`` section, then ``given`` values that are not None
    (``search``: KEY=SPACE strings, added to the section's); validated."""
    unknown = sorted(set(given) - set(NAMES))
    if unknown:
        raise TypeError(f"unknown tune options {unknown}; allowed: {', '.join(NAMES)}")
    if section is not None and not isinstance(section, dict):
        raise ConfigError("tune", section, "must be a mapping of search options (tune.samples...)")
    section = dict(section or {})
    search = section.pop("search", None) or {}
    if not isinstance(search, dict):
        raise ConfigError("tune.search", search, "must map dotted keys to spaces")
    options = build_dataclass(TuneOptions, section, "tune.")
    for name, value in given.items():
        if value is not None and name != "search":
            setattr(options, name, value)
    for f in dataclasses.fields(TuneOptions):
        check, value = f.metadata.get("check"), getattr(options, f.name)
        if check and not check[0](value):
            raise ConfigError(flag(f.name), value, check[1])
    options.search = {str(k): str(v) for k, v in search.items()}
    searched: set[str] = set()  # the command line's own (it replaces the file's)
    for text in given.get("search") or []:
        key, _, space = text.partition("=")
        if key.strip() in searched:
            raise ConfigError("--search", text, f"{key.strip()} is searched twice; give it once")
        searched.add(key.strip())
        options.search[key.strip()] = space
    if not options.search:
        raise ConfigError(
            "--search", None, "give at least one, e.g. client.lr='loguniform(1e-3,0.1)'"
        )
    return options


def given_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The TuneOptions values given on the command line (``--search`` groups flattened)."""
    given = {name: getattr(args, name, None) for name in NAMES}
    given["search"] = [text for group in given["search"] or [] for text in group]
    return given
