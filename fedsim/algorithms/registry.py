"""Algorithms by config name: a built-in is ``fedsim/algorithms/<name>.py`` with ``@register``
on its class and its keys in ``fedsim/algorithm_params/<name>.py``; one of your own is
``module:Class`` in the config naming a subclass of ``fedsim.algorithms.base.Algorithm``.

``register`` writes no table of keys: it checks that a built-in's ``name`` and ``Params`` agree
with what ``fedsim.algorithm_params`` discovered, and a class registered at run time, like a
plug-in, has its ``Params`` read from the class.
"""

from __future__ import annotations

import dataclasses

from fedsim.algorithm_params import CLASSES, PARAMS, allowed_algorithms
from fedsim.errors import ConfigError
from fedsim.plugins import import_subclass, is_import_path

ALGORITHMS = CLASSES  # config name -> class (the one table; fedsim.algorithm_params reads it)
BUILTIN_PACKAGE = "fedsim.algorithms."


def disagreement(cls: type) -> str:
    """Why ``cls`` cannot be registered, in one line ('' if it can)."""
    where, name = f"{cls.__module__}.{cls.__qualname__}", getattr(cls, "name", "")
    if not isinstance(name, str) or not name:
        return f"{where}: set name = '...' (its algorithm.name)"
    if cls.__module__.startswith(BUILTIN_PACKAGE):
        stem = cls.__module__.removeprefix(BUILTIN_PACKAGE)
        if name != stem:
            return f"{where}: name {name!r} is not its file's, {stem!r} (x.py registers x)"
        if name not in PARAMS:
            return f"{where}: fedsim/algorithm_params/{name}.py (its Params, summary) is missing"
    elif name in PARAMS:
        return f"{where}: {name!r} is fedsim/algorithms/{name}.py's name; pick another"
    if name in PARAMS and cls.Params is not PARAMS[name]:
        return (
            f"{where}: Params is {cls.Params.__qualname__}, but "
            f"fedsim/algorithm_params/{name}.py declares {PARAMS[name].__qualname__}"
        )
    if not (isinstance(cls.Params, type) and dataclasses.is_dataclass(cls.Params)):
        return f"{where}: Params is not a dataclass of its keys"
    earlier = ALGORITHMS.get(name)
    if earlier is not None and earlier.Params is not cls.Params:
        return f"{where}: algorithm {name!r} is registered with other keys already"
    return ""


def register(cls: type) -> type:
    """Class decorator: make ``cls`` available as ``algorithm.name = cls.name``, once
    ``disagreement`` finds nothing (a TypeError in one line otherwise)."""
    problem = disagreement(cls)
    if problem:
        raise TypeError(problem)
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
