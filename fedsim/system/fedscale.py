"""FedScale's published device traces (``client_device_capacity``, ``client_behave_trace``):
read without running code, checked, and converted to fedsim's units.

Both are pickled dicts keyed by client id. Capacity: ``{id: {"computation": ms of inference
per sample, "communication": kbit/s}}``; FedScale charges ``3.0 * samples * computation /
1000`` seconds to train (backward ~ 2x forward) and ``(up + down kbit) / communication`` to
transfer, where its model size in kbit is ``bytes / 1024 * 8``. Behaviour: ``{id: {"active":
[starts], "inactive": [ends], "finish_time": period, "duration", "model"}}``; FedScale asks
whether ``active[i] <= t % finish_time <= inactive[i]``.
"""

from __future__ import annotations

import io
import math
import pickle
from typing import Any

import numpy as np

from fedsim.errors import ConfigError

AUGMENTATION_FACTOR = 3.0  # FedScale's training / inference time per sample
BYTES_PER_S_PER_KBIT_S = 1024 / 8  # FedScale's kbit is 1024 bits (model bytes / 1024 * 8)
MS_PER_S = 1000.0


class _NamesAClass(pickle.UnpicklingError):
    """A pickle asked for a class or function (to build an object or to call it)."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, numbers and strings only: any class or function a pickle
    names is refused before it is imported, so a trace file cannot run code."""

    def find_class(self, module: str, name: str) -> Any:
        raise _NamesAClass(f"it names {module}.{name} (loading it could run code)")


def load_plain_pickle(path: str, key: str) -> Any:
    """The content of a pickle that holds plain data only; anything else is a ConfigError."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as err:
        raise ConfigError(key, path, f"cannot read the file ({err.strerror})") from None
    text = _csv_text(data)
    if text is not None:  # unpickled, its first letter would be read as an opcode
        raise ConfigError(key, path, f"is text, not a pickle (its first line: {text!r}): a CSV "
                          "trace is read by its name, so give it a .csv suffix")  # fmt: skip
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except _NamesAClass as err:
        raise ConfigError(key, path, f"{err}; a FedScale trace pickle may hold only dicts, "
                          "lists, numbers and strings") from None  # fmt: skip
    except Exception as err:  # noqa: BLE001 - a truncated or foreign file fails in many ways
        raise ConfigError(key, path, f"not a readable pickle ({type(err).__name__}: {err}); "
                          "expected a FedScale trace pickle or a .csv file") from None  # fmt: skip


def _csv_text(data: bytes) -> str | None:
    """The first line of ``data`` when it reads as a line of comma-separated text (a CSV file
    under a pickle's name), else None. Pickles of protocol 2 and later start with 0x80."""
    if data[:1] == b"\x80":
        return None
    first = data[:4096].split(b"\n", 1)[0].rstrip(b"\r")
    try:
        line = first.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return line if "," in line and line.isprintable() else None


def _clients(data: Any, key: str, path: str, layout: str) -> list[tuple[Any, dict]]:
    if not isinstance(data, dict) or not data:
        raise ConfigError(key, path, f"expected a non-empty dict {{client_id: {layout}}}, "
                          f"found {type(data).__name__} of {_size(data)}")  # fmt: skip
    for client, value in data.items():
        if not isinstance(value, dict):
            raise ConfigError(key, path, f"client {client!r}: expected a dict {layout}, "
                              f"found {type(value).__name__}")  # fmt: skip
    return list(data.items())


def _size(data: Any) -> str:
    return f"{len(data)} items" if hasattr(data, "__len__") else "one value"


def _number(value: Any, where: str, key: str, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(key, path, f"{where} is {value!r}; expected a number")
    return float(value)


def fedscale_devices(data: Any, key: str, path: str) -> tuple[np.ndarray, np.ndarray]:
    """``client_device_capacity`` -> (seconds to train one sample, bytes per second), one
    entry per client in the file's order; FedScale's 3x training factor is folded in."""
    layout = "{'computation': ms per sample, 'communication': kbit/s}"
    seconds, bandwidth = [], []
    for client, value in _clients(data, key, path, layout):
        pair = []
        for field in ("computation", "communication"):
            if field not in value:
                raise ConfigError(key, path, f"client {client!r} has no {field!r}; "
                                  f"each client is {layout}")  # fmt: skip
            number = _number(value[field], f"client {client!r} {field}", key, path)
            if not (number > 0 and math.isfinite(number)):
                raise ConfigError(key, path, f"client {client!r} {field} is {number}; "
                                  "it must be a finite positive number")  # fmt: skip
            pair.append(number)
        seconds.append(AUGMENTATION_FACTOR * pair[0] / MS_PER_S)
        bandwidth.append(pair[1] * BYTES_PER_S_PER_KBIT_S)
    return np.asarray(seconds, dtype=np.float64), np.asarray(bandwidth, dtype=np.float64)


def fedscale_availability(
    data: Any, key: str, path: str
) -> tuple[list[tuple[str, list[tuple[float, float, str]]]], float]:
    """``client_behave_trace`` -> per client (its label, [(start, end, where)...]) in the
    file's order, and the period (every client's ``finish_time``, which must agree).

    Ends past ``finish_time`` are cut there (FedScale never looks past it) and empty intervals
    are dropped (FedScale's closed ``[a, a]`` is on for an instant only)."""
    layout = "{'active': [...], 'inactive': [...], 'finish_time': seconds}"
    period: float | None = None
    clients = []
    for client, value in _clients(data, key, path, layout):
        for field in ("active", "inactive", "finish_time"):
            if field not in value:
                raise ConfigError(key, path, f"client {client!r} has no {field!r}; "
                                  f"each client is {layout}")  # fmt: skip
        finish = _number(value["finish_time"], f"client {client!r} finish_time", key, path)
        if not (finish > 0 and math.isfinite(finish)):
            raise ConfigError(key, path, f"client {client!r} finish_time is {finish}; it must "
                              "be a finite positive number of seconds")  # fmt: skip
        if period is None:
            period = finish
        elif finish != period:
            raise ConfigError(key, path, f"client {client!r} finish_time is {finish}, another "
                              f"client's is {period}; fedsim needs one period for the whole "
                              "trace")  # fmt: skip
        starts, ends = value["active"], value["inactive"]
        if not isinstance(starts, list | tuple) or not isinstance(ends, list | tuple):
            raise ConfigError(key, path, f"client {client!r}: active and inactive must be "
                              "lists of seconds")  # fmt: skip
        if len(starts) != len(ends):
            raise ConfigError(key, path, f"client {client!r} has {len(starts)} active and "
                              f"{len(ends)} inactive times; they must pair up")  # fmt: skip
        intervals = []
        for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
            where = f"client {client!r} interval {i}"
            a = _number(start, f"{where} active", key, path)
            b = _number(end, f"{where} inactive", key, path)
            if a > b:
                raise ConfigError(key, path, f"{where} starts at {a} after it ends at {b}")
            if min(b, finish) > a:
                intervals.append((a, min(b, finish), where))
        clients.append((repr(client), intervals))
    assert period is not None
    return clients, period
