"""Device and availability traces: what each trace entry (a real device) can do and when it is
online, read from fedsim's CSV formats or FedScale's pickles, and which entry each client takes.

Times are virtual seconds, bandwidths bytes per second. A synchronous-round scheduler asks
a trace about the entries its clients were mapped onto (``map_clients``, then ``pick``).
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedsim.errors import ConfigError
from fedsim.streams import TRACE_MAP_TAG
from fedsim.system.fedscale import fedscale_availability, fedscale_devices, load_plain_pickle

DEVICE_TRACE, AVAILABILITY_TRACE = 1, 2  # the "trace" word of the trace_map stream
DEVICE_COLUMNS = ("seconds_per_sample", "upload_bytes_per_s", "download_bytes_per_s")
AVAILABILITY_COLUMNS = ("device", "start", "end")
PICKLE_SUFFIXES = ("", ".pkl", ".pickle")
PERIOD_COMMENT = re.compile(r"#\s*period\s*:(.*)$", re.IGNORECASE)


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.array(array, dtype=np.float64)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class DeviceProfiles:
    """Per entry: virtual seconds to train one sample, upload and download bytes per second
    (inf: the network takes no time). ``source``: the file it was read from."""

    seconds_per_sample: np.ndarray
    upload_bps: np.ndarray
    download_bps: np.ndarray
    source: str

    def __post_init__(self) -> None:
        for name in ("seconds_per_sample", "upload_bps", "download_bps"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        if not self.seconds_per_sample.shape == self.upload_bps.shape == self.download_bps.shape:
            raise ValueError("DeviceProfiles: the three arrays must have one entry per device")

    def __len__(self) -> int:
        return len(self.seconds_per_sample)

    def pick(self, entries: np.ndarray) -> DeviceProfiles:
        """The rows ``entries``, in that order (row i of the result is entry ``entries[i]``)."""
        rows = np.asarray(entries, dtype=np.int64)
        return DeviceProfiles(self.seconds_per_sample[rows], self.upload_bps[rows],
                              self.download_bps[rows], self.source)  # fmt: skip


@dataclass(frozen=True, eq=False)
class AvailabilityTrace:
    """Per entry a (k, 2) array of sorted, non-overlapping ``[start, end)`` ON intervals in
    virtual seconds. ``period``: the trace repeats with it (time is taken modulo it); None:
    it does not, and after its last interval an entry is off for good."""

    intervals: tuple[np.ndarray, ...]
    period: float | None
    source: str
    _starts: np.ndarray = field(init=False, repr=False)  # every interval, entry by entry
    _ends: np.ndarray = field(init=False, repr=False)
    _owners: np.ndarray = field(init=False, repr=False)  # the entry of each interval

    def __post_init__(self) -> None:
        arrays = tuple(_frozen(np.reshape(iv, (-1, 2))) for iv in self.intervals)
        object.__setattr__(self, "intervals", arrays)
        flat = np.concatenate([*arrays, np.empty((0, 2))])
        object.__setattr__(self, "_starts", flat[:, 0])
        object.__setattr__(self, "_ends", flat[:, 1])
        counts = [len(iv) for iv in arrays]
        object.__setattr__(self, "_owners", np.repeat(np.arange(len(arrays)), counts))

    def __len__(self) -> int:
        return len(self.intervals)

    def pick(self, entries: np.ndarray) -> AvailabilityTrace:
        """The entries ``entries``, in that order."""
        return AvailabilityTrace(tuple(self.intervals[int(e)] for e in entries), self.period,
                                 self.source)  # fmt: skip

    def _phase(self, t: float) -> tuple[float, float]:
        """(start of the period holding t, t within it); (0, t) for a trace that never repeats."""
        if self.period is None:
            return 0.0, t
        cycle = math.floor(t / self.period)
        within = t - cycle * self.period
        if within >= self.period:  # rounding at a period's edge
            cycle, within = cycle + 1, within - self.period
        elif within < 0:
            cycle, within = cycle - 1, within + self.period
        return cycle * self.period, within

    def _interval_at(self, entry: int, within: float) -> int:
        """Index of the interval of ``entry`` holding ``within`` (a time in the period); -1:
        none."""
        ivs = self.intervals[entry]
        i = int(np.searchsorted(ivs[:, 0], within, side="right")) - 1
        return i if i >= 0 and within < ivs[i, 1] else -1

    def available(self, entry: int, t: float) -> bool:
        """Is ``entry`` online at time ``t``?"""
        return self._interval_at(entry, self._phase(t)[1]) >= 0

    def online_until(self, entry: int, t: float) -> float:
        """When the ON interval holding ``t`` ends (absolute time; an interval ending at the
        period's end continues into one starting at 0); inf only for an entry always on."""
        base, within = self._phase(t)
        i = self._interval_at(entry, within)
        if i < 0:
            raise ValueError(f"entry {entry} is offline at t={t}; ask next_online instead")
        ivs = self.intervals[entry]
        end = float(ivs[i, 1])
        if self.period is not None and end == self.period and ivs[0, 0] == 0:
            return math.inf if len(ivs) == 1 else base + self.period + float(ivs[0, 1])
        return base + end

    def next_online(self, entry: int, t: float) -> float:
        """The earliest time >= ``t`` at which ``entry`` is online; inf if never."""
        base, within = self._phase(t)
        ivs = self.intervals[entry]
        if self._interval_at(entry, within) >= 0:
            return t
        later = int(np.searchsorted(ivs[:, 0], within, side="right"))
        if later < len(ivs):
            return base + float(ivs[later, 0])
        if self.period is None or len(ivs) == 0:
            return math.inf
        return base + self.period + float(ivs[0, 0])

    def available_at(self, t: float) -> np.ndarray:
        """Per entry: is it online at time ``t``? (one pass over every interval)"""
        within = self._phase(t)[1]
        on = (self._starts <= within) & (within < self._ends)
        online = np.zeros(len(self.intervals), dtype=bool)
        online[self._owners[on]] = True
        return online


def read_device_trace(path: str, key: str) -> DeviceProfiles:
    """A device trace: fedsim's CSV (``.csv``) or FedScale's ``client_device_capacity``
    pickle (``.pkl``, ``.pickle`` or no extension). ``key``: the config key naming ``path``."""
    if _format(path, key) == "csv":
        return _read_device_csv(path, key)
    seconds, bandwidth = fedscale_devices(load_plain_pickle(path, key), key, path)
    return DeviceProfiles(seconds, bandwidth, bandwidth, path)


def read_availability_trace(path: str, key: str) -> AvailabilityTrace:
    """An availability trace: fedsim's CSV (``.csv``) or FedScale's ``client_behave_trace``
    pickle (``.pkl``, ``.pickle`` or no extension). ``key``: the config key naming ``path``."""
    if _format(path, key) == "csv":
        devices, period = _read_availability_csv(path, key)
    else:
        devices, period = fedscale_availability(load_plain_pickle(path, key), key, path)
    intervals = tuple(_interval_array(pieces, period, key, path) for _, pieces in devices)
    if not any(len(iv) for iv in intervals):
        raise ConfigError(key, path, "no device is ever online; a trace needs ON intervals")
    return AvailabilityTrace(intervals, period, path)


def map_clients(
    num_clients: int, num_entries: int, seed: int, trace: int, key: str, path: str
) -> np.ndarray:
    """Which trace entry each client takes: distinct entries, drawn on the ``trace_map``
    stream (``trace``: DEVICE_TRACE or AVAILABILITY_TRACE, so the two maps differ)."""
    if trace not in (DEVICE_TRACE, AVAILABILITY_TRACE):
        raise ValueError(f"trace={trace}: DEVICE_TRACE (1) or AVAILABILITY_TRACE (2)")
    if num_entries < num_clients:
        raise ConfigError(key, path, f"the trace has {num_entries} entries for {num_clients} "
                          "clients; each client takes a distinct entry by a seeded draw, so a "
                          "trace needs at least as many entries as clients")  # fmt: skip
    rng = np.random.default_rng([seed, TRACE_MAP_TAG, trace])
    return rng.choice(num_entries, size=num_clients, replace=False).astype(np.int64)


def _format(path: str, key: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix != ".csv" and suffix not in PICKLE_SUFFIXES:
        raise ConfigError(key, path, f"unknown extension {suffix!r}; allowed: .csv (fedsim's "
                          "format), .pkl, .pickle or none (FedScale's pickle)")  # fmt: skip
    if not os.path.isfile(path):
        raise ConfigError(key, path, "no such file; give the path of a .csv trace or of a "
                          "FedScale trace pickle")  # fmt: skip
    return "csv" if suffix == ".csv" else "fedscale"


def _csv_rows(path: str, key: str) -> tuple[list[tuple[int, list[str]]], str | None]:
    """(line number, cells) of every row but comments and blank lines, and the value of a
    ``# period: ...`` comment (None: none)."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as file:
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(key, path, f"cannot read the file as UTF-8 text ({err})") from None
    rows, period = [], None
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if text.startswith("#"):
            if (match := PERIOD_COMMENT.match(text)) is not None:
                if period is not None:
                    raise ConfigError(key, path, f"line {number}: a second '# period:' comment")
                period = match[1].strip()
        elif text:
            rows.append((number, [cell.strip() for cell in next(csv.reader([text]))]))
    if not rows:
        raise ConfigError(key, path, "the file has no header and no rows")
    if len(rows) == 1:
        raise ConfigError(key, path, "the file has a header but no rows; a trace needs a device")
    return rows, period


def _header(rows: list[tuple[int, list[str]]], allowed: list[tuple[str, ...]], key: str,
            path: str) -> tuple[str, ...]:  # fmt: skip
    number, cells = rows[0]
    if tuple(cells) not in allowed:
        wanted = " or ".join(",".join(columns) for columns in allowed)
        raise ConfigError(key, path, f"line {number}: the header is {','.join(cells)!r}; "
                          f"expected {wanted} (no other column)")  # fmt: skip
    return tuple(cells)


def _number(cell: str, column: str, number: int, key: str, path: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise ConfigError(key, path, f"line {number}: {column} is {cell!r}; expected a "
                          "number") from None  # fmt: skip
    if math.isnan(value):
        raise ConfigError(key, path, f"line {number}: {column} is nan; expected a number")
    return value


def _cells(row: tuple[int, list[str]], header: tuple[str, ...], key: str, path: str) -> list[str]:
    number, cells = row
    if len(cells) != len(header):
        raise ConfigError(key, path, f"line {number}: {len(cells)} values for the "
                          f"{len(header)} columns {','.join(header)}")  # fmt: skip
    return cells


def _read_device_csv(path: str, key: str) -> DeviceProfiles:
    rows, _ = _csv_rows(path, key)
    header = _header(rows, [DEVICE_COLUMNS, ("device", *DEVICE_COLUMNS)], key, path)
    names: dict[str, int] = {}
    values = []
    for row in rows[1:]:
        number, cells = row[0], _cells(row, header, key, path)
        if header[0] == "device":
            name, cells = cells[0], cells[1:]
            if not name:
                raise ConfigError(key, path, f"line {number}: the device is empty")
            if name in names:
                raise ConfigError(key, path, f"line {number}: device {name!r} is named on line "
                                  f"{names[name]} too; one row per device")  # fmt: skip
            names[name] = number
        parsed = []
        for cell, column in zip(cells, DEVICE_COLUMNS, strict=True):
            value = _number(cell, column, number, key, path)
            bandwidth = column != "seconds_per_sample"
            if value <= 0 or (math.isinf(value) and not bandwidth):
                allowed = "a positive number or inf" if bandwidth else "a finite positive number"
                raise ConfigError(key, path, f"line {number}: {column} is {value}; {allowed}")
            parsed.append(value)
        values.append(parsed)
    columns = np.asarray(values, dtype=np.float64).T
    return DeviceProfiles(columns[0], columns[1], columns[2], path)


def _read_availability_csv(
    path: str, key: str
) -> tuple[list[tuple[str, list[tuple[float, float, str]]]], float | None]:
    rows, period_text = _csv_rows(path, key)
    header = _header(rows, [AVAILABILITY_COLUMNS], key, path)
    period = None
    if period_text is not None:
        try:
            period = float(period_text)
        except ValueError:
            period = math.nan
        if not (period > 0 and math.isfinite(period)):
            raise ConfigError(key, path, f"'# period: {period_text}'; the period must be a "
                              "finite positive number of seconds")  # fmt: skip
    devices: dict[str, list[tuple[float, float, str]]] = {}
    for row in rows[1:]:
        number, (device, start, end) = row[0], _cells(row, header, key, path)
        if not device:
            raise ConfigError(key, path, f"line {number}: the device is empty")
        interval = (_number(start, "start", number, key, path),
                    _number(end, "end", number, key, path), f"line {number}")  # fmt: skip
        devices.setdefault(device, []).append(interval)
    return list(devices.items()), period


def _interval_array(pieces: list[tuple[float, float, str]], period: float | None, key: str,
                    path: str) -> np.ndarray:  # fmt: skip
    """One device's intervals checked, sorted, touching ones merged, as a (k, 2) array."""
    merged: list[list[float]] = []
    last_where = ""
    for start, end, where in sorted(pieces):
        if not (0 <= start < end) or math.isinf(start):
            raise ConfigError(key, path, f"{where}: the interval [{start}, {end}) must have "
                              "0 <= start < end")  # fmt: skip
        if period is not None and end > period:
            raise ConfigError(key, path, f"{where}: the interval ends at {end}, after the "
                              f"period {period}; intervals lie within [0, period]")  # fmt: skip
        if merged and start < merged[-1][1]:
            raise ConfigError(key, path, f"{where}: the interval [{start}, {end}) overlaps "
                              f"{last_where}'s; one device's intervals must not overlap (touching"
                              " ones are merged)")  # fmt: skip
        if merged and start == merged[-1][1]:
            merged[-1][1] = end
        else:
            merged.append([start, end])
        last_where = where
    return np.asarray(merged, dtype=np.float64).reshape(-1, 2)
