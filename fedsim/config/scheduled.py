"""Reading schedules from a config: which keys take one, and every value they give checked.

A schedule (``fedsim/schedules.py``) replaces a number only on a key declared
``checked(schedulable=True)``: one the algorithm or the worker reads afresh every round. A
key fixed when the run is built (a layer count, a cluster count, a validation split) refuses
one in one line that lists the keys beside it that take one.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from fedsim.checks import field_check, field_schedulable
from fedsim.errors import ConfigError
from fedsim.schedules import Schedule, check_values, is_schedule, parse_schedule


def schedulable_keys(cls: type) -> list[str]:
    """The keys of dataclass ``cls`` that take a schedule."""
    return [f.name for f in dataclasses.fields(cls) if field_schedulable(cls, f.name)]


def _is_integer(tp: Any) -> bool:
    return int in (tp, *typing.get_args(tp))


def take_schedules(section: dict[str, Any], cls: type, prefix: str) -> dict[str, Schedule]:
    """Each schedule of ``section`` (a raw config section read into ``cls``), by dotted key;
    ``section`` keeps round 0's value in its place, so the key's own checks apply to it."""
    names = {f.name for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    found: dict[str, Schedule] = {}
    for name, value in list(section.items()):
        if not is_schedule(value) or name not in names:
            continue  # an unknown key is refused by the section's own build
        key = f"{prefix}{name}"
        if not field_schedulable(cls, name):
            takes = ", ".join(schedulable_keys(cls)) or "none"
            raise ConfigError(
                key, value, "takes a number, not a schedule: it is fixed when the run is "
                f"built (keys here that take a schedule: {takes})",
            )  # fmt: skip
        integer = _is_integer(hints[name])
        schedule = parse_schedule(key, value, integer)
        section[name] = int(schedule.initial) if integer else schedule.initial
        found[key] = schedule
    return found


# what metrics.jsonl's rounds report (docs/reference/run-folder.md): an adaptive schedule's metric
EVALUATED = ("acc_weighted", "acc_mean", "acc_std", "acc_worst10", "loss", "perplexity")
REPORTED = (
    *EVALUATED, "train_loss", "num_trained", "seconds", "train_seconds_max_worker",
    "bytes_down", "bytes_up", "lr", "flops_per_client", "peak_memory_mib", "sim_time",
    "round_time", "evaluated_after_training", "participation_gap", "epsilon", "dp_delta",
    "clip_norm", "clipped_fraction", "anomaly_dropped", "arrivals", "stale", "stale_dropped",
    "dropouts", "staleness_mean", "staleness_max",
)  # fmt: skip
ALGORITHM_REPORTED = {"spcacw": ("alpha_zero", "lipschitz", "bias_term", "variance_term")}
# a prefix of an evaluation field, and the setting without which no round reports it
PREFIXES = {
    "val/unseen/": "eval.validation_ratio and eval.holdout_clients",
    "val/": "eval.validation_ratio", "unseen/": "eval.holdout_clients",
    "global/": "eval.model=both",
}  # fmt: skip


def _prefix_missing(prefix: str, cfg: Any) -> bool:
    """Whether the run lacks the setting that makes its rounds report ``prefix`` fields."""
    e = cfg.eval
    need = {"val/": e.validation_ratio > 0, "unseen/": e.holdout_clients > 0,
            "global/": e.model == "both"}  # fmt: skip
    return not all(on for part, on in need.items() if part in prefix)


def check_metric(key: str, metric: str, cfg: Any) -> None:
    """An adaptive schedule's ``metric`` is one this run's rounds report: a field of
    metrics.jsonl (its settings on), a module's ``train/<name>`` or a scheduled key."""
    own = ALGORITHM_REPORTED.get(cfg.algorithm.name, ())
    if metric in (*REPORTED, *own) or metric.startswith("train/") or metric in cfg.schedules:
        return
    for prefix, setting in PREFIXES.items():
        if metric.startswith(prefix) and metric[len(prefix) :] in (*EVALUATED, "participation_gap"):
            if _prefix_missing(prefix, cfg):
                raise ConfigError(f"{key}.metric", metric, f"reported only with {setting} set")
            return
    raise ConfigError(
        f"{key}.metric", metric, "no round reports it, so the value would never move: "
        f"allowed: {', '.join((*REPORTED, *own))}, train/<a name the model logs>, or a prefix "
        f"{', '.join(PREFIXES)} on {', '.join(EVALUATED)}",
    )  # fmt: skip


def check_schedules(cfg: Any) -> None:
    """Every value each schedule of ``cfg`` gives (every round's, or an adaptive one's
    range) passes its key's own check; the pairs a schedule cannot join are refused."""
    c = cfg.client
    for key, schedule in cfg.schedules.items():
        section, name = key.split(".")
        owner = cfg.algorithm.params if section == "algorithm" else getattr(cfg, section)
        check_values(key, schedule, cfg.rounds, field_check(type(owner), name))
        if schedule.adaptive:
            check_metric(key, schedule.settings["metric"], cfg)
    owned = [k for k in ("client.lr", "client.momentum", "client.weight_decay")
             if k in cfg.schedules]  # fmt: skip
    if owned and c.optimizer is None:  # the module's own configure_optimizers decides them
        raise ConfigError(
            owned[0], cfg.schedules[owned[0]].to_dict(),
            f"{cfg.model.name} defines its own configure_optimizers, which fedsim uses as it "
            "is: a schedule of its settings belongs there (or in model.args)",
        )  # fmt: skip
    if "client.momentum" in cfg.schedules and c.optimizer != "sgd":
        raise ConfigError(
            "client.momentum", cfg.schedules["client.momentum"].to_dict(),
            f"a momentum schedule acts only with client.optimizer=sgd (this run: {c.optimizer})",
        )  # fmt: skip
