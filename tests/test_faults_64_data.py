"""Issue 64, a newcomer's data: a typo'd hf: name fails before the Hub, a JSON-lines file
that is not UTF-8, a site column with nulls, an empty text column, data.resize on text, and
a min_samples refusal that says what it counts and how many each client has."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from test_faults_64_validation import packed_windows

from fedsim.config import load_config
from fedsim.data.build import build_group_federation
from fedsim.data.hf import HFSource, load_hf
from fedsim.data.hf.text import NEXT_TOKEN, TextSpec, tokenize_table
from fedsim.errors import ConfigError

TABULAR = ("x0", "x1")


def _jsonl(path: Path, rows: list[dict], raw: bytes = b"") -> Path:
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows) + raw)
    return path


@pytest.mark.parametrize("typo", ["imgz", "mydatz/rows.csv", "~no-such-user-64/rows"])
def test_a_typo_that_is_no_hub_id_fails_at_config_time(tmp_path, monkeypatch, typo):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # online: a Hub id would be tried
    began = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"data.name=hf:{typo}"])
    assert time.perf_counter() - began < 5  # the config alone: no Hub, no datasets import
    line = str(err.value)
    assert line.startswith(f"data.name='hf:{typo}': no such file or folder")
    assert "owner/name" in line and "\n" not in line


def test_a_shipped_configs_missing_folder_loads_beside_a_data_folder(tmp_path, monkeypatch):
    """``hf:data/celeba`` (configs/hf/, a folder the user makes) is owner/name-shaped: the
    config loads with or without a ``data/`` folder here (``make data`` makes one)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    assert load_config(None, ["data.name=hf:data/celeba"]).data.name == "hf:data/celeba"


def test_a_json_lines_file_that_is_not_utf8_is_one_line(tmp_path):
    rows = [{"x0": 0.1 * i, "x1": 1.0, "label": i % 2, "note": "ok"} for i in range(30)]
    bad = _jsonl(
        tmp_path / "rows.jsonl", rows, b'{"x0": 1, "x1": 2, "label": 0, "note": "caf\xe9"}\n'
    )
    with pytest.raises(ConfigError) as err:
        load_hf(HFSource(f"hf:{bad}", input_columns=TABULAR))
    assert f"{bad} is not UTF-8 text" in str(err.value) and "line 31" in str(err.value)
    good = _jsonl(tmp_path / "good.jsonl", rows)
    assert len(load_hf(HFSource(f"hf:{good}", input_columns=TABULAR)).dataset) == 30


def test_a_site_column_with_nulls_is_refused_not_merged_with_none(tmp_path):
    sites = [None, "None", "a"]
    rows = [{"x0": float(i), "x1": 1.0, "label": i % 2, "site": sites[i % 3]} for i in range(90)]
    path = _jsonl(tmp_path / "sites.jsonl", rows)
    with pytest.raises(ConfigError) as err:
        load_hf(HFSource(f"hf:{path}", input_columns=TABULAR, by="site"))
    line = str(err.value)
    assert line.startswith("data.partition.by='site': 30 of 90 rows have no value (null")


def test_an_empty_text_column_is_named_as_such():
    import datasets

    table = datasets.Dataset.from_dict({"text": ["", "  ", ""] * 10})
    spec = TextSpec("gpt2", "data.tokenizer", 16, True, NEXT_TOKEN)
    with pytest.raises(ConfigError) as err:  # before any tokenizer loads
        tokenize_table(spec, "hf:x", table, "text", None, 1, None, None)
    assert str(err.value).startswith("data.input_column='text': is an empty column")


def test_data_resize_on_a_language_model_is_refused(tmp_path):
    path = _jsonl(tmp_path / "text.jsonl", [{"text": "to be or not"}])
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"data.name=hf:{path}", "data.input_column=text",
                           "model.name=causal_lm", "data.resize=32"])  # fmt: skip
    line = str(err.value)
    assert line.startswith("data.resize=32: acts only with model.name=a model of images")
    assert "causal_lm" in line


def test_min_samples_says_it_counts_windows_and_how_many_each_client_has():
    data, _ = packed_windows([10, 20, 30])  # 120 windows
    groups = np.repeat(np.array(["ann", "bob", "cy"], dtype=object), [20, 40, 60])
    with pytest.raises(ConfigError) as err:
        build_group_federation(data.dataset, groups, 2, 64, 0.8, 0, "role")
    line = str(err.value)
    assert "has 0 values with >= 64 samples (windows of up to 5 tokens)" in line
    assert "its clients hold 60, 40, 20 windows (largest first)" in line
