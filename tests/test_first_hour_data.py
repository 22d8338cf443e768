"""Issue 56, a newcomer's own data files: every fault one line naming the file (points 10,
12, 14, 16), and tabular rows read column-wise to the same arrays (point 18)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedsim.data.hf import HFSource, load_hf
from fedsim.errors import ConfigError


def _save_disk(folder: Path) -> Path:
    import datasets

    rows = {"f0": [0.5 * i for i in range(20)], "label": [i % 2 for i in range(20)]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(folder))
    return folder


def _truncated_parquet(path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"f0": np.arange(50.0), "label": np.arange(50) % 3}), path)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    return path


def _missing_shard(folder: Path) -> Path:
    _save_disk(folder)
    for shard in folder.glob("*.arrow"):
        shard.unlink()
    return folder


FAULTS = [
    ("empty.csv", lambda p: p.write_bytes(b"") and p, "is empty (no header, no rows)"),
    ("header.csv", lambda p: p.write_text("f0,label\n") and p, "holds no rows (only a header?)"),
    ("latin1.csv", lambda p: p.write_bytes("f0,label\n1,caf\xe9\n".encode("latin-1")) and p,
     "is not UTF-8 text"),
    ("cut.parquet", _truncated_parquet, "is not a readable file of its kind"),
    ("disk", _missing_shard, "lacks data-00000-of-00001.arrow, a file its metadata lists"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "says"), FAULTS, ids=[f[0] for f in FAULTS])
def test_10_a_damaged_data_file_is_one_line_naming_it(tmp_path, name, make, says):
    path = make(tmp_path / name) or tmp_path / name
    with pytest.raises(ConfigError) as err:
        load_hf(HFSource(f"hf:{path}", input_columns=("f0",)))
    text = str(err.value)
    assert err.value.key == "data.name" and "\n" not in text
    assert str(path) in text and says in text, text


@pytest.mark.parametrize("typo", ["data/rows.csv", "./rows", "missing/sub/rows", "~/nowhere.csv"])
def test_12_a_mistyped_relative_path_fails_at_once_not_as_a_hub_id(tmp_path, monkeypatch, typo):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # online: a Hub id would be tried

    def no_hub(*args, **kwargs):
        raise AssertionError("a local path was tried on the Hub")

    monkeypatch.setattr("datasets.load_dataset", no_hub)
    with pytest.raises(ConfigError) as err:
        load_hf(HFSource(f"hf:{typo}"))
    assert "no such file or folder" in str(err.value)


def test_12_an_owner_name_id_still_goes_to_the_hub(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as err:
        load_hf(HFSource("hf:flwrlabs/femnist"))
    assert "cannot reach the Hugging Face Hub" in str(err.value)


def _tabular_csv(path: Path, rows: int = 300) -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 3))
    labels = ["b", "a", "c"]
    lines = ["f0,f1,f2,label,site"] + [
        f"{float(a)!r},{float(b)!r},{float(c)!r},{labels[i % 3]},s{i % 4}"
        for i, (a, b, c) in enumerate(x)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_14_data_resize_on_tabular_rows_is_refused(tmp_path):
    csv = _tabular_csv(tmp_path / "rows.csv")
    with pytest.raises(ConfigError) as err:
        load_hf(HFSource(f"hf:{csv}", input_columns=("f0", "f1"), resize=28))
    assert err.value.key == "data.resize"
    assert "acts only on images" in str(err.value) and "tabular rows" in str(err.value)


def test_18_tabular_columns_read_column_wise_equal_the_row_by_row_arrays(tmp_path):
    """The arrays of the column-wise reading equal what reading every row gave."""
    import datasets

    csv = _tabular_csv(tmp_path / "rows.csv")
    source = HFSource(f"hf:{csv}", input_columns=("f0", "f1", "f2"), by="site")
    hf = load_hf(source)
    table = datasets.load_dataset("csv", data_files=str(csv), cache_dir=str(tmp_path / "c"))
    table = table["train"]
    rows = np.stack([np.asarray(list(table[c]), dtype=np.float64) for c in source.input_columns], 1)
    assert np.array_equal(hf.dataset.features, rows.astype(np.float32))
    names = sorted(set(table["label"]))
    assert hf.info["label_names"] == names == ["a", "b", "c"]
    assert hf.dataset.labels.tolist() == [names.index(v) for v in table["label"]]
    assert hf.groups.tolist() == list(table["site"])


def test_18_the_column_wise_reader_refuses_what_rows_refused(tmp_path):
    csv = tmp_path / "bad.csv"
    csv.write_text("f0,label\n0.1,0.5\n0.2,1\n0.3,2\n")
    with pytest.raises(ConfigError, match="holds 0.5, not a class"):
        load_hf(HFSource(f"hf:{csv}", input_columns=("f0",)))
    holes = tmp_path / "holes.csv"
    holes.write_text("f0,label\n0.1,0\n,1\n0.3,2\n")
    with pytest.raises(ConfigError, match="rows must be finite numbers"):
        load_hf(HFSource(f"hf:{holes}", input_columns=("f0",)))


def test_16_csv_under_a_pickle_name_says_it_is_not_a_pickle(tmp_path):
    from fedsim.system.fedscale import load_plain_pickle

    path = tmp_path / "client_behave_trace"
    path.write_text("client_id,active,inactive\n0,1,2\n")
    with pytest.raises(ConfigError) as err:
        load_plain_pickle(str(path), "system.availability_trace")
    text = str(err.value)
    assert "is text, not a pickle" in text and "client_id,active,inactive" in text
    assert "lient_id" not in text.replace("client_id", "")
