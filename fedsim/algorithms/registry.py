"""Algorithms by config name: a new algorithm is one file with ``@register`` on its class."""

from __future__ import annotations

from fedsim.errors import ConfigError

ALGORITHMS: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: make ``cls`` available as ``algorithm.name = cls.name``."""
    ALGORITHMS[cls.name] = cls
    return cls


def get_algorithm_class(name: str) -> type:
    """The algorithm class for config name ``name``; a ConfigError lists the allowed names."""
    import fedsim.algorithms  # noqa: F401  (imports every algorithm file, filling the registry)

    if name not in ALGORITHMS:
        raise ConfigError("algorithm.name", name, f"allowed: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[name]
