"""Algorithms by config name: a new algorithm is one file with ``@register`` on its class,
or ``module:Class`` in the config naming a subclass of ``fedsim.algorithms.base.Algorithm``."""

from __future__ import annotations

from fedsim.errors import ConfigError
from fedsim.plugins import import_subclass, is_import_path

ALGORITHMS: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: make ``cls`` available as ``algorithm.name = cls.name``."""
    ALGORITHMS[cls.name] = cls
    return cls


def get_algorithm_class(name: str) -> type:
    """The algorithm class for config name ``name``; a ConfigError says what is allowed."""
    import fedsim.algorithms  # noqa: F401  (imports every algorithm file, filling the registry)
    from fedsim.algorithms.base import Algorithm

    if name in ALGORITHMS:
        return ALGORITHMS[name]
    allowed = (
        f"allowed: {', '.join(sorted(ALGORITHMS))}, or module:Class naming a subclass of "
        "fedsim.algorithms.base.Algorithm"
    )
    if not is_import_path(name):
        raise ConfigError("algorithm.name", name, allowed)
    return import_subclass("algorithm.name", name, Algorithm, allowed)
