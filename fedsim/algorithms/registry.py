"""Algorithms by config name: a new algorithm is one file with ``@register`` on its class,
or ``module:Class`` in the config naming a subclass of ``fedsim.algorithms.base.Algorithm``.

Its keys (the ``Params`` dataclass) are known to the config check through
``fedsim.algorithm_params``, which ``register`` keeps in step.
"""

from __future__ import annotations

from fedsim.algorithm_params import add_params, allowed_algorithms
from fedsim.errors import ConfigError
from fedsim.plugins import import_subclass, is_import_path

ALGORITHMS: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: make ``cls`` available as ``algorithm.name = cls.name``."""
    add_params(cls.name, cls.Params)
    ALGORITHMS[cls.name] = cls
    return cls


def get_algorithm_class(name: str) -> type:
    """The algorithm class for config name ``name``; a ConfigError says what is allowed."""
    import fedsim.algorithms  # noqa: F401  (imports every algorithm file, filling the registry)
    from fedsim.algorithms.base import Algorithm

    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if not is_import_path(name):
        raise ConfigError("algorithm.name", name, allowed_algorithms())
    return import_subclass("algorithm.name", name, Algorithm, allowed_algorithms())
