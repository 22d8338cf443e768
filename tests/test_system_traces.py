"""Trace readers (``fedsim/system/traces.py``, ``fedsim/system/fedscale.py``): fedsim's CSV
formats and FedScale's pickles read to hand-checked values in fedsim's units, interval
lookups at edges and across the period, one-line errors for bad files, a pickle that names a
class refused unrun, and the seeded client -> entry map."""

from __future__ import annotations

import math
import pickle
import random
from fractions import Fraction

import numpy as np
import pytest

from fedsim.errors import ConfigError
from fedsim.streams import TRACE_MAP_TAG
from fedsim.system.traces import (
    AVAILABILITY_TRACE,
    DEVICE_TRACE,
    AvailabilityTrace,
    DeviceProfiles,
    map_clients,
    read_availability_trace,
    read_device_trace,
)

DEVICE_KEY, AVAIL_KEY = "system.device_trace", "system.availability_trace"

# one client of FedScale's client_behave_trace as published (duration: the total ON time)
FEDSCALE_CLIENT = {
    "duration": 211625,
    "inactive": [65881, 133574, 208292, 276575, 295006, 356236, 400906, 475099],
    "finish_time": 518400,
    "active": [12788, 100044, 188992, 271372, 276663, 352625, 356267, 441193],
    "model": "CPH1801",
}


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def dump(tmp_path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(data))
    return str(path)


# --- fedsim's CSV formats -----------------------------------------------------------------


def test_device_csv_reads_named_rows_in_file_order(tmp_path):
    path = write(tmp_path, "devices.csv", (
        "# measured on three phones\n"
        "device,seconds_per_sample,upload_bytes_per_s,download_bytes_per_s\n"
        "pixel, 0.02, 125000, 1e6\n"
        "\n"
        "old_phone,0.5,20000,inf  \n"
        "# a comment between rows\n"
        '"laptop, wired",0.001,inf,inf\n'
    ))  # fmt: skip
    profiles = read_device_trace(path, DEVICE_KEY)
    assert len(profiles) == 3 and profiles.source == path
    np.testing.assert_array_equal(profiles.seconds_per_sample, [0.02, 0.5, 0.001])
    np.testing.assert_array_equal(profiles.upload_bps, [125000, 20000, math.inf])
    np.testing.assert_array_equal(profiles.download_bps, [1e6, math.inf, math.inf])


def test_device_csv_without_a_device_column(tmp_path):
    path = write(tmp_path, "d.csv", "seconds_per_sample,upload_bytes_per_s,download_bytes_per_s"
                 "\n0.1,10,20\n")  # fmt: skip
    profiles = read_device_trace(path, DEVICE_KEY)
    assert (profiles.seconds_per_sample.tolist(), profiles.upload_bps.tolist(),
            profiles.download_bps.tolist()) == ([0.1], [10.0], [20.0])  # fmt: skip


@pytest.fixture
def periodic(tmp_path) -> AvailabilityTrace:
    """b: [30, 40); a: [0, 10) + [10, 20) (touching: merged) and [90, 100); period 100."""
    path = write(tmp_path, "avail.csv", (
        "# period: 100\n"
        "device,start,end\n"
        "b,30,40\n"
        "a,90,100\n"
        "a,10,20\n"
        "a,0,10\n"
    ))  # fmt: skip
    return read_availability_trace(path, AVAIL_KEY)


def test_availability_csv_numbers_devices_by_first_appearance_and_merges_touching(periodic):
    assert periodic.period == 100.0 and len(periodic) == 2
    b, a = periodic.intervals
    np.testing.assert_array_equal(b, [[30, 40]])
    np.testing.assert_array_equal(a, [[0, 20], [90, 100]])


@pytest.mark.parametrize(("t", "on"), [
    (0, True), (19.999, True), (20, False), (89.9, False), (90, True), (99.99, True),
    (100, True), (119, True), (120, False), (195, True), (-5, True), (-15, False),
])  # fmt: skip
def test_available_at_edges_and_across_the_period(periodic, t, on):
    assert periodic.available(1, t) is on
    assert periodic.available_at(t)[1] == on


def test_online_until_continues_across_the_period_wrap(periodic):
    assert periodic.online_until(1, 5) == 20
    assert periodic.online_until(1, 95) == 120  # [90, 100) then [0, 20) of the next period
    assert periodic.online_until(1, 205) == 220
    assert periodic.online_until(1, 395) == 420
    assert periodic.online_until(0, 335) == 340
    with pytest.raises(ValueError, match="offline"):
        periodic.online_until(1, 50)


def test_next_online(periodic):
    assert periodic.next_online(1, 5) == 5  # already on
    assert periodic.next_online(1, 20) == 90  # its interval ended at 20 (exclusive)
    assert periodic.next_online(1, 50) == 90
    assert periodic.next_online(0, 40) == 130  # the next period
    assert periodic.next_online(0, 335) == 335
    assert periodic.next_online(0, 10) == 30


def test_available_at_is_one_bool_per_entry(periodic):
    assert periodic.available_at(35).tolist() == [True, False]
    assert periodic.available_at(95).tolist() == [False, True]
    assert periodic.available_at(60).tolist() == [False, False]


def test_a_trace_without_a_period_ends(tmp_path):
    path = write(tmp_path, "once.csv", "device,start,end\nx,5,10\ny,0,inf\n")
    trace = read_availability_trace(path, AVAIL_KEY)
    assert trace.period is None
    assert trace.next_online(0, 0) == 5 and trace.next_online(0, 10) == math.inf
    assert not trace.available(0, 1005) and trace.online_until(0, 7) == 10
    assert trace.online_until(1, 1e9) == math.inf  # on for good


def test_always_on_entry_is_online_until_inf():
    trace = AvailabilityTrace((np.array([[0.0, 50.0]]), np.array([[0.0, 10.0]])), 50.0, "x")
    assert trace.online_until(0, 1234.5) == math.inf
    assert trace.online_until(1, 1255) == 1260  # not always on: 1250 + 10


def test_pick_keeps_rows_in_the_order_asked(periodic):
    profiles = DeviceProfiles(np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0]),
                              np.array([4.0, 5.0, 6.0]), "p")  # fmt: skip
    picked = profiles.pick(np.array([2, 0, 1]))
    assert picked.seconds_per_sample.tolist() == [3.0, 1.0, 2.0]
    assert picked.upload_bps.tolist() == [30.0, 10.0, 20.0]
    assert picked.download_bps.tolist() == [6.0, 4.0, 5.0] and picked.source == "p"
    swapped = periodic.pick(np.array([1, 0]))
    np.testing.assert_array_equal(swapped.intervals[0], periodic.intervals[1])
    assert swapped.available_at(35).tolist() == [False, True] and swapped.period == 100.0


def test_traces_are_read_only(periodic):
    with pytest.raises(ValueError):
        periodic.intervals[0][0, 0] = 7.0


# --- FedScale's pickles -------------------------------------------------------------------


def test_fedscale_capacity_converts_units_and_keeps_file_order(tmp_path):
    path = dump(tmp_path, "client_device_capacity", {
        432802: {"computation": 162.0, "communication": 5648.109619499134},
        7: {"computation": 40, "communication": 1000},
    })  # fmt: skip
    profiles = read_device_trace(path, DEVICE_KEY)
    np.testing.assert_allclose(profiles.seconds_per_sample, [3 * 0.162, 3 * 0.040])
    np.testing.assert_allclose(profiles.upload_bps, [5648.109619499134 * 128, 128000])
    np.testing.assert_array_equal(profiles.upload_bps, profiles.download_bps)


def test_fedscale_capacity_gives_fedscales_completion_time(tmp_path):
    """FedScale: 3 * batch * steps * computation / 1000 s and (up + down kbit) / communication,
    its kbit being bytes / 1024 * 8; the same times from fedsim's per-sample, per-byte units."""
    capacity = {"computation": 162.0, "communication": 5648.1}
    profiles = read_device_trace(dump(tmp_path, "c.pkl", {1: capacity}), DEVICE_KEY)
    batch, steps, model_bytes = 20, 5, 4_500_000
    kbit = model_bytes / 1024.0 * 8.0
    fedscale_compute = 3.0 * batch * steps * capacity["computation"] / 1000.0
    fedscale_network = (kbit + kbit) / capacity["communication"]
    ours_compute = batch * steps * profiles.seconds_per_sample[0]
    ours_network = model_bytes / profiles.upload_bps[0] + model_bytes / profiles.download_bps[0]
    assert ours_compute == pytest.approx(fedscale_compute, rel=1e-12)
    assert ours_network == pytest.approx(fedscale_network, rel=1e-12)


def fedscale_is_active(client: dict, t: float) -> bool:
    """FedScale's rule, without its stepping index: active[i] <= t % finish_time <= inactive[i]."""
    norm = t % client["finish_time"]
    return any(a <= norm <= b for a, b in zip(client["active"], client["inactive"], strict=True))


def test_fedscale_behaviour_trace_agrees_with_fedscales_rule(tmp_path):
    second = {"active": [5], "inactive": [7], "finish_time": 518400}
    path = dump(tmp_path, "client_behave_trace", {3834: FEDSCALE_CLIENT, 12: second})
    trace = read_availability_trace(path, AVAIL_KEY)
    assert trace.period == 518400 and len(trace) == 2
    on = np.asarray(trace.intervals[0])
    np.testing.assert_array_equal(on[:, 0], FEDSCALE_CLIENT["active"])
    np.testing.assert_array_equal(on[:, 1], FEDSCALE_CLIENT["inactive"])
    assert (on[:, 1] - on[:, 0]).sum() == FEDSCALE_CLIENT["duration"]
    rng = random.Random(0)
    for t in [rng.uniform(0, 3 * 518400) for _ in range(2000)]:
        assert trace.available(0, t) == fedscale_is_active(FEDSCALE_CLIENT, t), t
    assert trace.available(0, 518400 + 12788) and not trace.available(0, 12787.5)
    assert trace.next_online(0, 0) == 12788
    assert trace.next_online(0, 480000) == 518400 + 12788
    assert trace.online_until(0, 518400 + 13000) == 518400 + 65881


def test_fedscale_behaviour_cuts_at_finish_time_and_drops_empty_intervals(tmp_path):
    client = {"active": [0, 50, 70, 95], "inactive": [10, 50, 80, 130], "finish_time": 100}
    trace = read_availability_trace(dump(tmp_path, "b.pickle", {"c": client}), AVAIL_KEY)
    np.testing.assert_array_equal(trace.intervals[0], [[0, 10], [70, 80], [95, 100]])
    assert trace.online_until(0, 96) == 110  # [95, 100) runs on into [0, 10)


class Boom:
    """Unpickling this calls ``_record`` (as a malicious trace would call os.system)."""

    called: list[str] = []

    def __reduce__(self):
        return (_record, ("ran",))


def _record(what: str) -> None:
    Boom.called.append(what)


@pytest.mark.parametrize("payload", [
    {1: Boom()}, {1: {"computation": np.float64(1.0), "communication": 2.0}},
    {1: {"computation": Fraction(1, 2), "communication": 2.0}},
], ids=["callable", "numpy-scalar", "fraction"])  # fmt: skip
def test_the_unpickler_refuses_any_class_and_runs_nothing(tmp_path, payload):
    path = dump(tmp_path, "evil.pkl", payload)
    with pytest.raises(ConfigError, match="could run code") as err:
        read_device_trace(path, DEVICE_KEY)
    assert "\n" not in str(err.value) and Boom.called == []


# --- errors -------------------------------------------------------------------------------

DEVICE_HEADER = "seconds_per_sample,upload_bytes_per_s,download_bytes_per_s\n"
BAD_DEVICE_CSV = [
    ("", "no header and no rows"),
    ("# only a comment\n", "no header and no rows"),
    (DEVICE_HEADER, "header but no rows"),
    ("seconds_per_sample,upload_bytes_per_s\n1,2\n", "line 1: the header is"),
    ("device," + DEVICE_HEADER.strip() + ",battery\nx,1,2,3,4\n", "no other column"),
    (DEVICE_HEADER + "1,2,3\n1,2\n", "line 3: 2 values for the 3 columns"),
    (DEVICE_HEADER + "fast,2,3\n", "line 2: seconds_per_sample is 'fast'"),
    (DEVICE_HEADER + "0,2,3\n", "line 2: seconds_per_sample is 0.0; a finite positive"),
    (DEVICE_HEADER + "inf,2,3\n", "seconds_per_sample is inf; a finite positive"),
    (DEVICE_HEADER + "1,-2,3\n", "upload_bytes_per_s is -2.0; a positive number or inf"),
    (DEVICE_HEADER + "1,2,nan\n", "download_bytes_per_s is nan"),
    ("device," + DEVICE_HEADER + "x,1,2,3\n\nx,1,2,3\n", "line 4: device 'x' is named on line 2"),
    ("device," + DEVICE_HEADER + ",1,2,3\n", "line 2: the device is empty"),
]  # fmt: skip
AVAIL_HEADER = "device,start,end\n"
BAD_AVAILABILITY_CSV = [
    ("device,start,stop\na,1,2\n", "expected device,start,end"),
    (AVAIL_HEADER + "a,5,5\n", "line 2: the interval [5.0, 5.0) must have 0 <= start < end"),
    (AVAIL_HEADER + "a,-1,5\n", "0 <= start < end"),
    (AVAIL_HEADER + "a,0,10\nb,0,1\na,5,12\n", "line 4: the interval [5.0, 12.0) overlaps line 2"),
    ("# period: 10\n" + AVAIL_HEADER + "a,0,11\n", "ends at 11.0, after the period 10.0"),
    ("# period: 10\n" + AVAIL_HEADER + "a,0,inf\n", "after the period"),
    ("# period: a day\n" + AVAIL_HEADER + "a,0,1\n", "'# period: a day'; the period must be"),
    ("# period: -3\n" + AVAIL_HEADER + "a,0,1\n", "the period must be a finite positive"),
    ("# period: 5\n# period: 6\n" + AVAIL_HEADER + "a,0,1\n", "line 2: a second"),
    (AVAIL_HEADER + ",0,1\n", "line 2: the device is empty"),
    (AVAIL_HEADER + "a,0\n", "line 2: 2 values for the 3 columns"),
]  # fmt: skip
BAD_CAPACITY = [
    ([1, 2], "expected a non-empty dict"),
    ({}, "expected a non-empty dict"),
    ({5: [1.0, 2.0]}, "client 5: expected a dict"),
    ({5: {"computation": 1.0}}, "client 5 has no 'communication'"),
    ({5: {"computation": -1.0, "communication": 2}}, "client 5 computation is -1.0"),
    ({5: {"computation": True, "communication": 2}}, "client 5 computation is True"),
    ({5: {"computation": "fast", "communication": 2}}, "expected a number"),
    ({5: {"computation": 1, "communication": float("inf")}}, "finite positive"),
]  # fmt: skip
BAD_BEHAVIOUR = [
    ({1: {"active": [1], "inactive": [2]}}, "client 1 has no 'finish_time'"),
    ({1: {"active": [1, 3], "inactive": [2], "finish_time": 9}}, "2 active and 1 inactive"),
    ({1: {"active": [3], "inactive": [2], "finish_time": 9}}, "starts at 3.0 after it ends"),
    ({1: {"active": [0, 3], "inactive": [5, 6], "finish_time": 9}}, "interval 1: the interval"),
    ({1: {"active": [1], "inactive": [2], "finish_time": 9},
      2: {"active": [1], "inactive": [2], "finish_time": 8}}, "fedsim needs one period"),
    ({1: {"active": [1], "inactive": [1], "finish_time": 9}}, "no device is ever online"),
    ({1: {"active": 1, "inactive": 2, "finish_time": 9}}, "must be lists of seconds"),
    ({1: {"active": [1], "inactive": [2], "finish_time": 0}}, "finish_time is 0.0"),
]  # fmt: skip


def assert_one_line(err: pytest.ExceptionInfo, key: str, path: str, fragment: str) -> None:
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{key}={path!r}: "), message
    assert fragment in message, message
    assert err.value.key == key and err.value.value == path


BAD_FILES = [
    *[(write, "devices.csv", read_device_trace, DEVICE_KEY, c, f) for c, f in BAD_DEVICE_CSV],
    *[(write, "avail.csv", read_availability_trace, AVAIL_KEY, c, f)
      for c, f in BAD_AVAILABILITY_CSV],
    *[(dump, "client_device_capacity", read_device_trace, DEVICE_KEY, c, f)
      for c, f in BAD_CAPACITY],
    *[(dump, "client_behave_trace", read_availability_trace, AVAIL_KEY, c, f)
      for c, f in BAD_BEHAVIOUR],
]  # fmt: skip


@pytest.mark.parametrize(
    ("save", "name", "read", "key", "content", "fragment"),
    BAD_FILES,
    ids=[f"{b[1]}:{b[5]}" for b in BAD_FILES],
)
def test_a_bad_trace_is_one_line_naming_key_and_path(
    tmp_path, save, name, read, key, content, fragment
):
    """Our CSVs and FedScale's pickles, each malformed in its own ways."""
    path = save(tmp_path, name, content)
    with pytest.raises(ConfigError) as err:
        read(path, key)
    assert_one_line(err, key, path, fragment)


@pytest.mark.parametrize(("name", "content", "fragment"), [
    ("nowhere.csv", None, "no such file"),
    ("trace.json", b"{}", "unknown extension '.json'"),
    ("broken.pkl", b"\x80\x04not a pickle at all", "not a readable pickle"),
    ("text.pkl", b"device,start,end\n", "is text, not a pickle"),
    ("latin1.csv", "device,start,end\n\xe9,0,1\n".encode("latin-1"), "cannot read the file"),
])  # fmt: skip
def test_unreadable_files_are_one_line(tmp_path, name, content, fragment):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    for read, key in ((read_device_trace, DEVICE_KEY), (read_availability_trace, AVAIL_KEY)):
        with pytest.raises(ConfigError) as err:
            read(str(path), key)
        assert_one_line(err, key, str(path), fragment)


# --- clients onto entries -----------------------------------------------------------------


def test_map_clients_is_a_seeded_draw_of_distinct_entries():
    first = map_clients(50, 500, seed=3, trace=DEVICE_TRACE, key=DEVICE_KEY, path="d.csv")
    again = map_clients(50, 500, seed=3, trace=DEVICE_TRACE, key=DEVICE_KEY, path="d.csv")
    other_seed = map_clients(50, 500, seed=4, trace=DEVICE_TRACE, key=DEVICE_KEY, path="d.csv")
    other_trace = map_clients(50, 500, 3, AVAILABILITY_TRACE, AVAIL_KEY, "a.csv")
    assert first.dtype == np.int64 and first.shape == (50,)
    assert len(set(first.tolist())) == 50 and 0 <= first.min() and first.max() < 500
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other_seed) and not np.array_equal(first, other_trace)
    drawn = np.random.default_rng([3, TRACE_MAP_TAG, DEVICE_TRACE]).choice(500, 50, replace=False)
    np.testing.assert_array_equal(first, drawn)  # the trace_map stream of fedsim/streams.py
    every = map_clients(7, 7, seed=0, trace=AVAILABILITY_TRACE, key=AVAIL_KEY, path="a.csv")
    assert sorted(every.tolist()) == list(range(7))


def test_map_clients_refuses_fewer_entries_than_clients():
    with pytest.raises(ConfigError) as err:
        map_clients(10, 4, seed=0, trace=DEVICE_TRACE, key=DEVICE_KEY, path="d.csv")
    assert_one_line(err, DEVICE_KEY, "d.csv", "the trace has 4 entries for 10 clients")
    assert "distinct entry by a seeded draw" in str(err.value)
