"""Every algorithm's keys (``algorithm.<key>``) and one-line summary, without importing torch.

A built-in algorithm ``x`` is ``fedsim/algorithms/x.py`` (its class, registered as ``x``) and
``fedsim/algorithm_params/x.py`` (its ``Params`` dataclass, and its summary as the module
docstring's first line). The second is found here by discovery: a module of this package that
sets ``Params`` is an algorithm's (``base``, ``aggregation_weights`` and ``server_optimizer``
are shared pieces). Checking a config reads ``Params`` from here, so it never imports an
algorithm (torch takes a second); ``fedsim.algorithms.registry.register`` checks that the class
agrees. An algorithm named by import path (``module:Class``) or registered at run time has its
``Params`` read from the class.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from types import MappingProxyType, ModuleType
from typing import Any

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.errors import ConfigError
from fedsim.plugins import import_object, is_import_path


def _discover() -> dict[str, ModuleType]:
    """Config name -> the module of this package that declares its ``Params``."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if not hasattr(module, "Params"):
            continue
        params = module.Params
        if not (isinstance(params, type) and issubclass(params, AlgorithmParams)
                and dataclasses.is_dataclass(params)):  # fmt: skip
            raise TypeError(f"{module.__name__}.Params is not a dataclass of AlgorithmParams")
        if not (module.__doc__ or "").strip():
            raise TypeError(f"{module.__name__} has no docstring (its first line: the summary)")
        found[info.name] = module
    return found


MODULES = MappingProxyType(_discover())
# config name -> Params of fedsim's own algorithms (fedsim/algorithms/<name>.py registers <name>)
PARAMS: MappingProxyType[str, type[AlgorithmParams]] = MappingProxyType(
    {name: module.Params for name, module in MODULES.items()}
)
BUILTIN_NAMES = tuple(PARAMS)
# algorithm classes by config name, filled by fedsim.algorithms.registry.register only
CLASSES: dict[str, type] = {}
ALGORITHM_BASE = "fedsim.algorithms.base.Algorithm"  # checked by name: no torch imported here


def summary(name: str) -> str:
    """The one-line summary of built-in ``name``: its params module's docstring's first line."""
    return MODULES[name].__doc__.strip().splitlines()[0]


def example(name: str) -> list[str]:
    """The overrides of ``name``'s smallest runnable example beside ``algorithm.name``: what a
    default config needs to run it (a required key, a model or partition it needs), declared
    once as ``EXAMPLE`` in its params module (a plug-in class: its ``EXAMPLE`` attribute)."""
    source = MODULES.get(name) or CLASSES.get(name)
    return list(getattr(source, "EXAMPLE", ()))


ADAPTERS = ("lora", "residual", "personal", "scaled")  # lightning_modules/adapters.py's variants


def adapter(name: str) -> str | None:
    """The adapter variant ``name`` declares as ``ADAPTER`` in its params module (a plug-in
    class: its ``ADAPTER`` attribute): None (any model), ``lora`` (acts on a LoRA adapter's
    A and B), ``residual``, ``personal`` or ``scaled`` (that variant of the adapter, which
    fedsim asks the model to build: ``lightning_modules/adapters.py``)."""
    source = MODULES.get(name) or CLASSES.get(name)
    if source is None and is_import_path(name):
        source = import_object("algorithm.name", name, "module:Class naming an algorithm")
    declared = getattr(source, "ADAPTER", None)
    if declared is not None and declared not in ADAPTERS:
        raise TypeError(f"{name} declares ADAPTER={declared!r}; allowed: {', '.join(ADAPTERS)}")
    return declared


def example_params(name: str) -> dict[str, Any]:
    """The ``algorithm.*`` values of ``name``'s example, as its ``Params`` take them."""
    import yaml

    values = {}
    for override in example(name):
        key, _, value = override.partition("=")
        if key.startswith("algorithm."):
            values[key.removeprefix("algorithm.")] = yaml.safe_load(value)
    return values


def summaries() -> dict[str, str]:
    """Every built-in's summary, by config name (``fedsim keys``, the reference pages)."""
    return {name: summary(name) for name in BUILTIN_NAMES}


def allowed_algorithms() -> str:
    names = sorted({*PARAMS, *CLASSES})
    return f"allowed: {', '.join(names)}, or module:Class naming a subclass of {ALGORITHM_BASE}"


def class_params(name: str, cls: type) -> type[AlgorithmParams]:
    """``cls.Params``, the keys of a plug-in or a class registered at run time; a ConfigError
    unless it is a dataclass."""
    params = cls.Params
    if not (isinstance(params, type) and dataclasses.is_dataclass(params)):
        raise ConfigError(
            "algorithm.name", name, f"{cls.__name__}.Params is not a dataclass of its keys"
        )
    return params


def params_class(name: str) -> type[AlgorithmParams]:
    """The ``Params`` dataclass of ``algorithm.name``; a ConfigError says what is allowed.

    A ``module:Class`` is imported here (user code, as a plug-in is) and must subclass
    ``Algorithm`` (checked by the base's qualified name, so this module imports no torch).
    """
    if name in PARAMS:
        return PARAMS[name]
    if name in CLASSES:
        return class_params(name, CLASSES[name])
    if not is_import_path(name):
        raise ConfigError("algorithm.name", name, allowed_algorithms())
    cls = import_object("algorithm.name", name, allowed_algorithms())
    if not (isinstance(cls, type) and any(c.__module__ + "." + c.__qualname__ == ALGORITHM_BASE
                                          for c in cls.__mro__)):  # fmt: skip
        what = cls.__name__ if isinstance(cls, type) else type(cls).__name__ + " instance"
        raise ConfigError(
            "algorithm.name", name, f"{what} is not a subclass of {ALGORITHM_BASE}; "
            + allowed_algorithms(),
        )  # fmt: skip
    return class_params(name, cls)


__all__ = [
    "BUILTIN_NAMES",
    "CLASSES",
    "PARAMS",
    "AlgorithmParams",
    "allowed_algorithms",
    "class_params",
    "example",
    "example_params",
    "params_class",
    "summaries",
    "summary",
]
