"""User code named in the config by import path: ``model.name=my_pkg.nets:MyNet``.

A value with a colon is ``module:attribute`` (the attribute may be dotted); a plain name is a
built-in. Resolution happens while the config is validated, so a path that does not import
is a one-line ``ConfigError`` naming the key before any run folder or Ray worker exists.
The Ray executor ships the user's top-level modules to its workers (``plugin_paths``).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fedsim.errors import ConfigError

# fedsim's own packages: installed with fedsim on every node, never shipped.
FEDSIM_PACKAGES = ("fedsim", "lightning_modules", "ray_jobs")


def is_import_path(value: str) -> bool:
    """Whether a config value names user code (``module:attribute``) rather than a built-in."""
    return isinstance(value, str) and ":" in value


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def import_object(key: str, path: str, allowed: str) -> Any:
    """The object at ``module:attribute``; a ConfigError naming ``key`` if it is not there.

    ``allowed`` ends every message (what the key accepts).
    """
    module_name, _, attribute = path.partition(":")
    if not module_name.strip() or not attribute.strip():
        raise ConfigError(key, path, f"expected module:attribute; {allowed}")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure is a bad config value
        reason = _one_line(f"{type(error).__name__}: {error}")
        raise ConfigError(
            key, path, f"module {module_name!r} does not import ({reason}); {allowed}"
        ) from None
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ConfigError(
                key, path, f"module {module_name!r} has no attribute {attribute!r}; {allowed}"
            )
        obj = getattr(obj, part)
    return obj


def import_subclass(key: str, path: str, base: type, allowed: str) -> type:
    """The class at ``path``, which must subclass ``base`` (ConfigError otherwise)."""
    obj = import_object(key, path, allowed)
    if not (isinstance(obj, type) and issubclass(obj, base)):
        what = obj.__name__ if isinstance(obj, type) else type(obj).__name__ + " instance"
        raise ConfigError(
            key, path, f"{what} is not a subclass of {base.__module__}.{base.__name__}; {allowed}"
        )
    return obj


def check_callable_with(key: str, path: str, fn: Any, keywords: tuple[str, ...], allowed: str):
    """ConfigError unless ``fn`` can be called with (a subset of) ``keywords`` only."""
    if not callable(fn):
        raise ConfigError(key, path, f"{type(fn).__name__} is not callable; {allowed}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins without a signature: trust them
    for name, param in signature.parameters.items():
        required = param.default is inspect.Parameter.empty and param.kind not in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        )
        if required and name not in keywords:
            raise ConfigError(key, path, f"required parameter {name!r} is never passed; {allowed}")


def call_with(fn: Any, **available: Any) -> Any:
    """Call ``fn`` with those of ``available`` that its signature names (all, with ``**``)."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(**available)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return fn(**available)
    return fn(**{k: v for k, v in available.items() if k in parameters})


def _installed(path: Path) -> bool:
    """Whether ``path`` lies in this interpreter's site-packages or standard library."""
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    return any(path.is_relative_to(Path(root).resolve()) for root in roots)


def plugin_paths(module_names: Iterable[str]) -> list[str]:
    """Where the top-level modules of user code among ``module_names`` live (a package's
    folder, a module's .py file); they are imported here already.

    fedsim's own packages and installed packages are left out: workers import them from
    their own environment. The rest is what Ray must ship (``runtime_env["py_modules"]``).
    """
    found: dict[str, str] = {}
    for name in module_names:
        top = name.split(".")[0]
        if not top or top in FEDSIM_PACKAGES or top in found or top == "__main__":
            continue
        module = sys.modules.get(top)
        package_dirs = list(getattr(module, "__path__", None) or ())
        location = package_dirs[0] if len(package_dirs) == 1 else getattr(module, "__file__", None)
        if module is None or location is None or _installed(Path(location).resolve()):
            continue
        found[top] = str(Path(location).resolve())
    return list(found.values())


def config_plugin_paths(*values: str) -> list[str]:
    """``plugin_paths`` of the config values that are import paths (model.name, data.name,
    algorithm.name; validated, so imported here): what a Ray job must ship to its workers,
    e.g. ``join_or_start_ray(address, py_modules=config_plugin_paths(...))``."""
    return plugin_paths(v.partition(":")[0] for v in values if is_import_path(v))


def lazy_exports(package: str, exports: dict[str, str]) -> Any:
    """A package's ``__getattr__`` (PEP 562) that imports each name from its module on first
    use, so importing the package itself stays light (``exports``: name -> module)."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name]), name)

    return __getattr__
