"""Checks of the deployment options against each other, the algorithm and the cohort size.

Run when the simulation is built, before any worker starts; each failure is one ConfigError
naming the key, its value and why.
"""

from __future__ import annotations

from typing import Any

from fedsim.deployment.decision import checked_uploads
from fedsim.errors import ConfigError


def non_default_options(cfg: Any) -> list[tuple[str, Any]]:
    """(key, value) of every deployment option that needs a model upload and is set."""
    a, p, c, k = cfg.aggregation, cfg.privacy, cfg.compression, cfg.attack
    found = [
        ("aggregation.rule", a.rule, a.rule != "mean"),
        ("aggregation.anomaly_cosine", a.anomaly_cosine, a.anomaly_cosine is not None),
        ("attack.kind", k.kind, k.kind not in ("none", "label_flip")),
        ("privacy.mode", p.mode, p.mode != "none"),
        ("privacy.clip_norm", p.clip_norm, p.clip_norm is not None),
        ("compression.kind", c.kind, c.kind != "none"),
    ]
    return [(key, value) for key, value, on in found if on]


def check_deployment(
    cfg: Any, algorithm: Any, cohort_size: int, cohort_source: str, num_clients: int
) -> None:
    """ConfigError unless the options make sense together and for ``algorithm`` (what every
    client uploads is read from ``decide_upload``, as the tasks will carry it)."""
    name = cfg.algorithm.name
    p, a = cfg.privacy, cfg.aggregation
    options = non_default_options(cfg)
    if options:
        uploads = list(checked_uploads(algorithm, num_clients, cfg.rounds))
        if any(upload is None for upload in uploads):
            key, value = options[0]
            raise ConfigError(
                key,
                value,
                f"algorithm.name={name} uploads no model update this option could act on; leave "
                "it at its default (docs/deployment.md lists the algorithms that do)",
            )
        needs_mean = [
            ("aggregation.rule", a.rule, a.rule != "mean"),
            ("privacy.mode", p.mode, p.mode == "central"),
        ]
        for key, value, on in needs_mean:
            if on and not all(upload.sums for upload in uploads if upload is not None):
                raise ConfigError(
                    key,
                    value,
                    f"algorithm.name={name} has no sum that is a plain mean of one model every "
                    "client received, so neither a robust rule nor central noise applies",
                )
    if p.mode in ("local", "central") and p.clip_norm is None:
        raise ConfigError(
            "privacy.clip_norm",
            None,
            f"privacy.mode={p.mode} needs a clip norm C (the noise std is noise_multiplier * C)",
        )
    if p.adaptive and p.clip_norm is None:
        raise ConfigError("privacy.adaptive", True, "needs privacy.clip_norm (its first value)")
    if p.mode == "central" and a.rule != "mean":
        raise ConfigError(
            "privacy.mode",
            "central",
            f"central noise is calibrated to the mean, not to aggregation.rule={a.rule}",
        )
    check_rule(a, cohort_size, cohort_source)


def check_rule(a: Any, n: int, source: str = "join_ratio") -> None:
    """ConfigError unless the robust rule can run on ``n`` updates at once (``source``: the
    key that sets ``n``, named in the message)."""
    f = a.krum_f
    has = f"the server combines {n} at once ({source})"
    if a.rule in ("krum", "multikrum") and n <= 2 * f + 2:
        raise ConfigError(
            "aggregation.krum_f",
            f,
            f"aggregation.rule={a.rule} needs more than 2f + 2 = {2 * f + 2} updates; {has}",
        )
    if a.rule == "bulyan" and n < 4 * f + 3:
        raise ConfigError(
            "aggregation.krum_f",
            f,
            f"aggregation.rule=bulyan needs at least 4f + 3 = {4 * f + 3} updates; {has}",
        )
    if a.rule == "multikrum" and a.krum_m is not None and a.krum_m > n:
        raise ConfigError("aggregation.krum_m", a.krum_m, f"at most the updates per round; {has}")
