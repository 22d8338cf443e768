"""What a checkpoint may name when it is unpickled: fedsim's own classes, numpy, plug-ins.

``torch.load(weights_only=True)`` builds only the globals it is given. These functions turn
the globals a checkpoint file names into objects, or refuse it with a one-line ConfigError:
classes defined in fedsim's state-holding modules and ``lightning_modules`` (not functions,
not the modules that drive runs), numpy's array, scalar and dtype reconstruction, and the
modules of the run's algorithm and model when its config names them by import path.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from fedsim.errors import ConfigError

# fedsim's packages whose classes a checkpoint may name...
TRUSTED_PACKAGES = ("fedsim", "lightning_modules")
# ...except the modules that drive runs (their constructors read data, start runs, write files)
UNTRUSTED_MODULES = (
    "fedsim.cli",
    "fedsim.experiment",
    "fedsim.simulation",
    "fedsim.runtime",
    "fedsim.tracking",
    "fedsim.search",
    "fedsim.plugins",
    "fedsim.interrupts",
)


# numpy's array, scalar and dtype reconstruction (numpy 1 and 2 spell the module differently)
def _numpy_global(name: str) -> Any:
    import numpy as np

    multiarray = np._core.multiarray if hasattr(np, "_core") else np.core.multiarray
    fixed = {"numpy.ndarray": np.ndarray, "numpy.dtype": np.dtype}
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        fixed[f"{module}._reconstruct"] = multiarray._reconstruct
        fixed[f"{module}.scalar"] = multiarray.scalar
    if name in fixed:
        return fixed[name]
    prefix = "numpy.dtypes."
    if name.startswith(prefix) and hasattr(np, "dtypes"):
        obj = getattr(np.dtypes, name[len(prefix) :], None)
        if isinstance(obj, type) and issubclass(obj, np.dtype):
            return obj
    return None


def empty_bytes() -> bytes:
    """``bytes()`` as pickle protocol 2 (``torch.save``'s) writes an empty bytes object: the
    raw data of an empty numpy array (FC's cluster tree before its first merge). Other bytes
    are written through ``_codecs.encode``; this takes no argument, so it builds nothing else."""
    return b""


# the names protocol 2 gives bytes (Python 2's and 3's)
_BYTES = ("builtins.bytes", "__builtin__.bytes")


def numpy_dtype_classes() -> list[type]:
    """numpy's dtype classes (``numpy.dtypes.Float32DType``...; none before numpy 1.25)."""
    import numpy as np

    found = vars(np.dtypes).values() if hasattr(np, "dtypes") else []
    return [c for c in found if isinstance(c, type) and issubclass(c, np.dtype)]


def plugin_modules(config: dict[str, Any] | None) -> list[str]:
    """The modules of ``config``'s algorithm and model named by import path (``module:Class``).

    Only a real subclass of ``Algorithm`` / ``FLModule`` counts; one that does not import,
    or is not one, is left out (its checkpoint globals are then refused).
    """
    from fedsim.plugins import import_subclass, is_import_path

    modules: list[str] = []
    if not isinstance(config, dict):
        return modules
    for section in ("algorithm", "model"):
        name = (
            config.get(section, {}).get("name") if isinstance(config.get(section), dict) else None
        )
        if not (isinstance(name, str) and is_import_path(name)):
            continue
        if section == "algorithm":
            from fedsim.algorithms.base import Algorithm as base
        else:
            from lightning_modules.base import FLModule as base
        try:
            cls = import_subclass(f"{section}.name", name, base, "")
        except ConfigError:
            continue
        modules.append(cls.__module__)
    return modules


def _defined_in(module_name: str, qualname: str) -> Any:
    """The object ``module_name.qualname`` if it is defined in that module (not imported into
    it), else None."""
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception:  # noqa: BLE001 - refused by the caller
        return None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if getattr(obj, "__module__", None) != module_name:
        return None
    return obj if getattr(obj, "__qualname__", None) == qualname else None


def _fedsim_class(name: str) -> Any:
    """The class a checkpoint global ``name`` names in fedsim's state-holding modules, or None.

    The longest importable prefix of ``name`` is its module; modules that drive runs are
    refused before they are imported. Classes only: fedsim's functions include ones that
    delete folders.
    """
    parts = name.split(".")
    for k in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:k])
        if any(module_name == u or module_name.startswith(u + ".") for u in UNTRUSTED_MODULES):
            return None
        try:
            importlib.import_module(module_name)
        except ImportError:
            continue
        obj = _defined_in(module_name, ".".join(parts[k:]))
        return obj if isinstance(obj, type) else None
    return None


def allowed_global(name: str, path: Path, plugins: list[str]) -> Any:
    """The object for checkpoint global ``name`` if fedsim loads it; ConfigError otherwise."""
    top = name.split(".")[0]
    obj = None
    if name in _BYTES:
        obj = empty_bytes
    elif top == "numpy":
        obj = _numpy_global(name)
    elif top in TRUSTED_PACKAGES:
        obj = _fedsim_class(name)
    else:
        for module_name in plugins:
            if name.startswith(module_name + "."):
                obj = _defined_in(module_name, name[len(module_name) + 1 :])
                break
    if obj is None:
        raise ConfigError(
            "--resume", str(path), f"checkpoint references {name}, which fedsim does not load"
        )
    return obj
