"""Datasets `make data` prepares are named by data.name; a config naming one loads anywhere,
and building its data where the file is missing is one line saying how to make it."""

from __future__ import annotations

import pytest

from fedsim.config import load_config
from fedsim.data.assemble import build_data
from fedsim.data.prepared import PREPARED, prepared_path
from fedsim.errors import ConfigError

MODEL = {"debian-reference": "causal_lm", "shakespeare-instruct": "causal_lm"}


@pytest.mark.parametrize("name", sorted(PREPARED))
def test_a_missing_prepared_file_says_make_data(name, tmp_path):
    cfg = load_config(None, [f"data.name={name}", f"data.root={tmp_path}",
                             f"model.name={MODEL[name]}"])  # fmt: skip
    assert cfg.data.name == f"hf:{prepared_path(name, tmp_path)}"
    with pytest.raises(ConfigError) as missing:
        build_data(cfg)
    line = str(missing.value)
    assert line.startswith(f"data.name='{name}': needs ") and "`make data`" in line
    assert "\n" not in line
    assert not any(tmp_path.iterdir())  # nothing written
