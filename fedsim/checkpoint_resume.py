"""Whether a config may resume a checkpoint's run: which keys may change, and how keys added
to fedsim since the checkpoint was written count (as their defaults); the checkpoint a
resumed run starts from (``resumable_checkpoint``: damaged newer ones set aside).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedsim.checkpoint import Checkpoint, checkpoint_dir, newest_readable_checkpoint
from fedsim.checkpoint_digest import digest_path
from fedsim.errors import ConfigError

if TYPE_CHECKING:
    from fedsim.config import ExperimentConfig

# Keys a resumed run may change: how long it runs, where it runs, where it reports.
RESUMABLE_CHANGES = ("name", "rounds", "checkpoint_every", "runtime", "tracking")


def _filled(old: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``old`` with the keys it lacks (at any depth) taken from ``defaults``."""
    out = dict(old)
    for key, value in defaults.items():
        if key not in out:
            out[key] = value
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = _filled(out[key], value)
    return out


def config_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """Every key's default, resolved as a config dict, ``config``'s algorithm's keys included.

    An algorithm key that must be given (it has no usable default) is left out: never filled.
    """
    import json

    from fedsim.config import ExperimentConfig, load_config

    algorithm = config.get("algorithm") or {}
    given: dict[str, Any] = {}  # keys the algorithm requires, taken from ``config``
    try:
        for _ in range(len(algorithm) + 1):
            overrides = [f"algorithm.{k}={json.dumps(v)}" for k, v in given.items()]
            try:
                defaults = load_config(None, [f"algorithm.name={algorithm['name']}", *overrides])
                break
            except ConfigError as err:
                key = err.key.removeprefix("algorithm.")
                if err.key == key or key in given or key not in algorithm:
                    raise
                given[key] = algorithm[key]
        else:
            raise ValueError("too many required algorithm keys")
    except Exception:  # noqa: BLE001 - then the algorithm's keys have no defaults
        out = ExperimentConfig().to_dict()
        out["algorithm"] = {}
        return out
    out = defaults.to_dict()
    for key in given:
        out["algorithm"].pop(key, None)
    return out


def _without(config: dict[str, Any], dotted: tuple[str, ...]) -> dict[str, Any]:
    """A copy of ``config`` without the ``dotted`` keys (``client.lr``), at any depth."""
    out = copy.deepcopy(config)
    for key in dotted:
        *path, last = key.split(".")
        section: Any = out
        for part in path:
            section = section.get(part) if isinstance(section, dict) else None
        if isinstance(section, dict):
            section.pop(last, None)
    return out


def check_resumable(
    checkpoint: Checkpoint, config: dict[str, Any], path: Path, may_change: tuple[str, ...] = ()
) -> None:
    """Raise ConfigError unless ``config`` continues the checkpoint's run.

    A key the checkpoint's config lacks (one added to fedsim after it was written) counts as
    unchanged when ``config`` has its default there. ``may_change``: dotted keys that may
    differ besides RESUMABLE_CHANGES (a Population Based Training exploit continues another
    trial's checkpoint with new values of the searched keys).
    """
    saved = _without(_filled(checkpoint.config, config_defaults(config)), may_change)
    current = _without(config, may_change)
    changed = sorted(
        key
        for key in set(current) | set(saved)
        if key not in RESUMABLE_CHANGES and current.get(key) != saved.get(key)
    )
    if changed:
        allowed = ", ".join((*RESUMABLE_CHANGES, *may_change))
        raise ConfigError(
            "--resume",
            str(path),
            f"the config differs from the checkpoint's in {', '.join(changed)}; only "
            f"{allowed} may change",
        )
    if config["rounds"] < checkpoint.rounds_trained:
        raise ConfigError(
            "rounds",
            config["rounds"],
            f"the checkpoint has {checkpoint.rounds_trained} rounds trained; resume with at "
            "least that many",
        )


def resumable_checkpoint(
    cfg: ExperimentConfig, run_dir: Path, may_change: tuple[str, ...] = ()
) -> Checkpoint:
    """The newest readable checkpoint in ``run_dir``, checked against ``cfg`` (raises ConfigError).

    Damaged newer ones are renamed aside (``round_00004.pt.damaged``) with a one-line
    warning saying which rounds run again; none readable is a ConfigError. ``may_change``:
    dotted keys the config may change besides those any resume may (``check_resumable``).
    """
    config = cfg.to_dict()
    checkpoint, path, damaged = newest_readable_checkpoint(run_dir, config)
    if not damaged and checkpoint is None:
        raise ConfigError(
            "--resume",
            str(run_dir),
            f"no checkpoint in {checkpoint_dir(run_dir)} (a run saves them when "
            "checkpoint_every > 0): run it again with --overwrite, or pick a new folder",
        )
    if checkpoint is None or path is None:
        reasons = "; ".join(f"{err.path.name}: {err.reason}" for err in damaged)
        raise ConfigError("--resume", str(run_dir), f"no readable checkpoint ({reasons})")
    check_resumable(checkpoint, config, path, may_change)
    if damaged:  # kept aside for inspection, and said which rounds run again
        newest = max(int(err.path.stem.split("_")[-1]) for err in damaged)
        first, last = checkpoint.rounds_trained, newest - 1
        again = f"round {first} is" if first == last else f"rounds {first}-{last} are"
        again += " computed again"
        for err in damaged:
            aside = err.path.with_name(err.path.name + ".damaged")
            err.path.replace(aside)
            digest = digest_path(err.path)
            if digest.is_file():
                digest.replace(digest.with_name(digest.name + ".damaged"))
            print(
                f"fedsim: warning: {err.path.parent.name}/{err.path.name} is damaged "
                f"({err.reason}), kept as {aside.name}; resuming from {path.name}: {again}",
                file=sys.stderr,
            )
    return checkpoint
