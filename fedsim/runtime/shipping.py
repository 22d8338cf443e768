"""Ship the user's own modules (config import paths) to Ray workers.

fedsim's packages and installed packages are imported from each worker's environment; a
model, dataset or algorithm named by ``module:attribute`` from the user's own folder is not,
so the pool's actors get it through Ray's ``runtime_env``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from fedsim.data.federated import FederatedData
from fedsim.plugins import is_import_path, plugin_paths
from fedsim.runtime.worker import WorkerSpec

# bytecode caches: each worker compiles its own, and one written here between two runs would
# change the upload's content hash (a new upload, and pool actors started again for it)
NOT_SHIPPED = ("__pycache__", "*.pyc")


def plugin_runtime_env(spec: WorkerSpec, data: FederatedData) -> dict[str, Any]:
    """``runtime_env`` that ships the user's modules (config import paths) to the workers.

    The model named by path, the algorithm's classes and the dataset's class must import
    in every actor. Empty when only fedsim's own (or installed) code is in use: no cost.
    """
    names = [spec.model.name.partition(":")[0]] if is_import_path(spec.model.name) else []
    names += [cls.__module__ for cls in type(spec.algorithm).__mro__]
    for part in (getattr(spec.algorithm, "params", None), getattr(data, "dataset", None)):
        names.append(type(part).__module__)
    paths = plugin_paths(names)
    return ship_py_modules(paths) if paths else {}


def ship_py_modules(paths: list[str]) -> dict[str, Any]:
    """Upload local modules/packages to the cluster; a per-actor ``runtime_env`` using them.

    Ray accepts local ``py_modules`` only in ``ray.init`` (the job), not per actor, and our
    pool may join a Ray started elsewhere; so we do what ``ray.init`` does: zip each one
    into the cluster's object store (content-hashed, uploaded once) and pass the URIs, which
    every node unpacks onto its workers' ``sys.path``. Where Ray's uploader is not there
    (its module is private), the folders go on the workers' ``PYTHONPATH``: enough on one
    machine or a shared filesystem. Bytecode caches are not shipped (``NOT_SHIPPED``).
    """
    try:
        from ray._private.runtime_env.py_modules import upload_py_modules_if_needed

        with tempfile.TemporaryDirectory(prefix="fedsim-py-modules-") as scratch:
            env = upload_py_modules_if_needed(
                {"py_modules": list(paths), "excludes": list(NOT_SHIPPED)},
                include_gitignore=True,
                scratch_dir=scratch,
            )
        return {"py_modules": list(env["py_modules"])}
    except (ImportError, TypeError):
        folders = list(dict.fromkeys(str(Path(p).parent) for p in paths))
        return {"env_vars": {"PYTHONPATH": os.pathsep.join([*folders, "${PYTHONPATH}"])}}


def carries(started_with: dict[str, Any], needed: dict[str, Any]) -> bool:
    """Do actors started with the runtime_env ``started_with`` import every module a run
    that ships ``needed`` uses? Uploads are content-hashed per module, so actors that carry
    more (a pool started for several packages) serve it as they are; a ``PYTHONPATH``
    environment (no uploader) must be the same."""
    if set(needed) - {"py_modules"}:
        return started_with == needed
    return set(needed.get("py_modules", ())) <= set(started_with.get("py_modules", ()))
