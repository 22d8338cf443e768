"""The converted-dataset cache of hf: data (fedsim/data/hf/cache.py): written once a run is
accepted, memory-mapped by the next run (no conversion), equal to a fresh conversion, and
never read when the data or the column choice changed. Offline."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hf_fixtures import save_femnist

from fedsim.cli import main
from fedsim.data.hf import cache as hf_cache
from fedsim.data.hf import load as hf

NATURAL = ["data.label_column=character", "data.partition.name=natural",
           "data.partition.by=writer_id", "data.min_samples=10", "data.num_clients=3"]  # fmt: skip
TINY = ["rounds=1", "runtime.executor=local", "client.batch_size=20", "--no-progress"]


@pytest.fixture
def femnist(tmp_path) -> Path:
    return save_femnist(tmp_path / "hf")[0]


@pytest.fixture
def conversions(monkeypatch) -> list[str]:
    """Every conversion of an Arrow table in this test (the in-process cache cleared)."""
    calls: list[str] = []
    convert = hf.convert

    def counted(source, table, *train_rows):
        calls.append(source.name)
        return convert(source, table, *train_rows)

    monkeypatch.setattr(hf, "convert", counted)
    hf.load_hf.cache_clear()
    yield calls
    hf.load_hf.cache_clear()


def run(tmp_path: Path, name: str, *overrides: str) -> dict:
    out = tmp_path / name
    args = ["run", "configs/quickstart.yaml", *TINY, *overrides, "--out", str(out)]
    assert main(args) == 0
    hf.load_hf.cache_clear()  # as a new process would start
    return json.loads((out / "partition.json").read_text())


def entries(root: Path) -> list[Path]:
    folder = root / hf_cache.CACHE_DIR
    return (
        sorted(p for p in folder.iterdir() if not p.name.startswith(".")) if folder.exists() else []
    )


def test_the_second_run_reads_the_cache_and_sees_the_same_data(femnist, tmp_path, conversions):
    root = tmp_path / "root"
    keys = [f"data.name=hf:{femnist}", f"data.root={root}", *NATURAL]
    first = run(tmp_path, "first", *keys)
    assert len(conversions) == 1 and len(entries(root)) == 1
    second = run(tmp_path, "second", *keys)
    assert len(conversions) == 1  # read from the cache, not converted again
    assert second == first  # the same clients, samples and label map
    dataset, groups, info = hf_cache.read(entries(root)[0])
    # mapped, not read into memory; a plain ndarray, which Ray ships without a copy
    assert isinstance(dataset.images.base, np.memmap) and type(dataset.images) is np.ndarray
    assert not dataset.images.flags.writeable
    fresh = hf.convert(hf.HFSource(f"hf:{femnist}", label_column="character", by="writer_id"),
                       __import__("datasets").load_from_disk(str(femnist)))  # fmt: skip
    assert np.array_equal(dataset.images, fresh[0].images)
    assert np.array_equal(dataset.labels, fresh[0].labels)
    assert list(groups) == list(fresh[1]) and info == fresh[2]


def test_a_change_of_columns_or_data_makes_a_new_entry(femnist, tmp_path, conversions):
    root = tmp_path / "root"
    keys = [f"data.name=hf:{femnist}", f"data.root={root}", *NATURAL]
    run(tmp_path, "a", *keys)
    run(tmp_path, "b", *keys, "data.resize=32")  # another conversion of the same table
    assert len(conversions) == 2 and len(entries(root)) == 2
    data_file = next(femnist.glob("*.arrow"))
    stat = data_file.stat()
    os.utime(data_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the data changed
    run(tmp_path, "c", *keys)
    assert len(conversions) == 3 and len(entries(root)) == 3


def test_a_refused_run_writes_no_cache(femnist, tmp_path, capsys, conversions):
    root = tmp_path / "root"
    keys = [f"data.name=hf:{femnist}", f"data.root={root}", *NATURAL, "data.resize=14"]
    out = tmp_path / "refused"
    assert main(["run", "configs/quickstart.yaml", *TINY, *keys, "--out", str(out)]) == 2
    assert "does not fit the data" in capsys.readouterr().err  # found after the conversion
    assert len(conversions) == 1 and entries(root) == [] and not out.exists()


def test_a_conversion_outside_an_accepted_run_is_never_written(femnist, tmp_path, conversions):
    from fedsim.config import load_config
    from fedsim.simulation import build_data

    root = tmp_path / "root"
    cfg = load_config("configs/quickstart.yaml", [f"data.name=hf:{femnist}", f"data.root={root}",
                                                  *NATURAL])  # fmt: skip
    build_data(cfg)  # a Simulation built in a test or a notebook, never run
    run(tmp_path, "other", f"data.name=hf:{femnist}", f"data.root={root}", *NATURAL,
        "data.resize=32")  # fmt: skip
    assert len(conversions) == 2 and len(entries(root)) == 1  # only the accepted run's


def test_a_stale_format_is_not_read(femnist, tmp_path, conversions):
    root = tmp_path / "root"
    keys = [f"data.name=hf:{femnist}", f"data.root={root}", *NATURAL]
    run(tmp_path, "a", *keys)
    meta = entries(root)[0] / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "format": 0}))
    assert hf_cache.read(entries(root)[0]) is None
