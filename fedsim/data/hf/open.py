"""Opening an ``hf:`` source's split: a ``save_to_disk`` folder, a parquet / CSV / JSON file
or folder (or, online only, a Hub id). A file that cannot be read (empty, only a header, not
UTF-8, truncated, a missing shard) is one ConfigError line naming it and what is wrong.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsim.data.names import HF_PREFIX, looks_local
from fedsim.errors import ConfigError
from fedsim.hub_offline import offline_reason

FILE_BUILDERS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}


@dataclass(frozen=True)
class HFSource:
    """What to read: ``data.name`` (hf:path), ``data.split``, the input column(s),
    ``data.label_column``, ``data.partition.by`` (or None) and ``data.resize`` (or None)."""

    name: str
    split: str = "train"
    input_columns: tuple[str, ...] = ("image",)
    label_column: str = "label"
    by: str | None = None
    resize: int | None = None
    test_split: str | None = None  # natural clients' test rows come from this split
    text: Any = None  # a text column tokenized for a language model (text.TextSpec)

    @property
    def path(self) -> Path:
        return Path(self.name[len(HF_PREFIX) :]).expanduser()


def with_test_split(source: HFSource, table: Any, cache: str) -> tuple[Any, int]:
    """``table`` followed by the rows of ``data.test_split`` (one conversion, so string
    labels map to the same ids), and where those rows start."""
    import datasets

    if source.test_split == source.split:
        raise ConfigError("data.test_split", source.test_split, "is data.split: pick another")
    test = open_split(
        dataclasses.replace(source, split=source.test_split), cache, "data.test_split"
    )
    if test.features != table.features:
        raise ConfigError(
            "data.test_split", source.test_split, f"has other columns or types than "
            f"data.split={source.split}: the two splits must share one schema",
        )  # fmt: skip
    return datasets.concatenate_datasets([table, test]), len(table)


def _hub_unreachable(source: HFSource, reason: str) -> ConfigError:
    return ConfigError(
        "data.name",
        source.name,
        f"{source.path} is not a local path, and this machine cannot reach the Hugging Face Hub "
        f"({reason}): load it where the Hub is reachable, save it with datasets' save_to_disk "
        "(or as parquet) and pass that local path, data.name=hf:/path/to/folder",
    )


def open_split(source: HFSource, cache: str, key: str = "data.split") -> Any:
    """The ``data.split`` split of a local folder or file (or, online only, a Hub id)."""
    import datasets

    datasets.disable_progress_bars()
    path = source.path
    if not path.exists() and looks_local(source.name[len(HF_PREFIX) :]):
        raise ConfigError(
            "data.name", source.name, f"no such file or folder ({path.absolute()}): check the "
            "path (a Hugging Face Hub id is owner/name)",
        )  # fmt: skip
    if not path.exists():
        offline = offline_reason()  # the one rule of every Hub access (fedsim/hub_offline.py)
        if offline is not None:
            raise _hub_unreachable(source, offline)
        try:  # online: datasets' own cache, so a second run does not download again
            loaded = datasets.load_dataset(source.name[len(HF_PREFIX) :])
        except Exception as error:  # noqa: BLE001 - any failure becomes one config error line
            raise _hub_unreachable(source, type(error).__name__) from None
    elif path.is_dir() and any((path / f).is_file() for f in ("dataset_dict.json", "state.json")):
        loaded = _read(source, lambda: datasets.load_from_disk(str(path)))
    elif path.is_file() and path.suffix in FILE_BUILDERS:
        builder = FILE_BUILDERS[path.suffix]
        if builder == "json":  # Arrow's JSON reader takes bytes that are not UTF-8 as text
            check_utf8(source, path)
        loaded = _read(
            source, lambda: datasets.load_dataset(builder, data_files=str(path), cache_dir=cache)
        )
    elif path.is_dir():
        for part in sorted(path.rglob("*.json*")):
            check_utf8(source, part)
        loaded = _read(source, lambda: datasets.load_dataset(str(path), cache_dir=cache))
    else:
        raise ConfigError(
            "data.name", source.name,
            f"allowed: a save_to_disk folder, or a {', '.join(FILE_BUILDERS)} file or folder",
        )  # fmt: skip
    if isinstance(loaded, datasets.Dataset):
        if source.split != "train":
            raise ConfigError(key, source.split, "that data has one split, train")
        return _rows(source, loaded)
    if source.split not in loaded:
        raise ConfigError(key, source.split, f"allowed: {', '.join(loaded)}")
    return _rows(source, loaded[source.split])


def check_utf8(source: HFSource, path: Path, chunk: int = 1 << 20) -> None:
    """A ConfigError naming ``path``'s line and byte where it is not UTF-8 text."""
    import codecs

    decoder, offset, line = codecs.getincrementaldecoder("utf-8")(), 0, 1
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            try:
                decoder.decode(block)
            except UnicodeDecodeError as err:
                bad = offset + err.start
                line += block[: err.start].count(b"\n")
                raise ConfigError(
                    "data.name", source.name, f"{path} is not UTF-8 text (byte {bad}, line "
                    f"{line}): save it as UTF-8",
                ) from None  # fmt: skip
            offset, line = offset + len(block), line + block.count(b"\n")
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise ConfigError(
                "data.name", source.name, f"{path} is not UTF-8 text (it ends inside a "
                "character): save it as UTF-8",
            ) from None  # fmt: skip


def _rows(source: HFSource, table: Any) -> Any:
    """``table``, unless it has no rows (a file with only a header)."""
    if len(table) == 0:
        raise ConfigError("data.name", source.name, f"{source.path} holds no rows (only a header?)")
    return table


def _read(source: HFSource, load: Callable[[], Any]) -> Any:
    """``load()``, its failure on a damaged or foreign file one ConfigError line (datasets'
    own error log silenced: the line says it)."""
    logger = logging.getLogger("datasets")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        return load()
    except ConfigError:
        raise
    except Exception as error:  # noqa: BLE001 - any damaged file becomes one line
        raise ConfigError("data.name", source.name, read_fault(source.path, error)) from None
    finally:
        logger.setLevel(level)


def read_fault(path: Path, error: BaseException) -> str:
    """What is wrong with the file at ``path``, from the error reading it raised."""
    causes = [error]
    while causes[-1].__cause__ is not None or causes[-1].__context__ is not None:
        nxt = causes[-1].__cause__ or causes[-1].__context__
        if nxt in causes or len(causes) > 8:
            break
        causes.append(nxt)  # type: ignore[arg-type]
    names = [type(c).__name__ for c in causes]
    text = " ".join(str(error).split())
    if "EmptyDataError" in names:
        return f"{path} is empty (no header, no rows)"
    for cause in causes:
        if isinstance(cause, UnicodeDecodeError):
            return f"{path} is not UTF-8 text (byte {cause.start} of a line): save it as UTF-8"
    if isinstance(error, FileNotFoundError):
        missing = Path(error.filename).name if error.filename else text
        return (f"{path} lacks {missing}, a file its metadata lists (copied in part?): save "
                "it again with save_to_disk or copy the whole folder")  # fmt: skip
    if "corresponds to no data" in text:
        return f"{path} holds no rows (only a header?)"
    if "ArrowInvalid" in names or "parquet" in text.lower():
        reason = text[:160]
        return (
            f"{path} is not a readable file of its kind ({reason}): truncated, or another format?"
        )
    cause = causes[-1]
    return f"{path} cannot be read ({type(cause).__name__}: {' '.join(str(cause).split())[:160]})"
