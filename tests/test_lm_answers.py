"""One-line answers to a language-model user's first mistakes (issue 61): peft's names in
model.args (the fedsim name suggested), a data.min_samples that drops every client of packed
text (the windows each client has and the value that keeps them), MOON and FedRoD on an
adapter model (no advice to edit the built-in model), data.label_column on next-token data.
On the tiny Llama of ``lora_fixtures.py``."""

from __future__ import annotations

import csv
import re
from types import SimpleNamespace

import numpy as np
import pytest

from fedsim.config import load_config
from fedsim.errors import ConfigError

pytestmark = [pytest.mark.xdist_group("lora"), pytest.mark.usefixtures("few_plays")]




def lm_config(tiny: str, root, *overrides: str):
    return load_config("configs/quickstart.yaml", [
        "runtime.executor=local", "data.name=shakespeare-lm", "data.num_clients=3",
        "data.min_samples=8", "data.max_length=16", f"data.root={root}", "model.name=causal_lm",
        f"model.args={{source: {tiny}, rank: 2}}", "rounds=1", *overrides,
    ])  # fmt: skip


@pytest.mark.parametrize(
    ("peft", "ours", "value"),
    [("r", "rank", 4), ("lora_r", "rank", 4), ("lora_alpha", "alpha", 32),
     ("lora_dropout", "dropout", 0.1), ("target_modules", "targets", ["q_proj"])],
)  # fmt: skip
def test_peft_names_suggest_fedsims(tiny, peft, ours, value):
    from lightning_modules.registry import build_model

    with pytest.raises(ConfigError) as err:
        build_model("causal_lm", {"source": tiny, peft: value})
    assert str(err.value).startswith(f"model.args.{peft}=")
    assert f"set model.args.{ours} (the same meaning)" in str(err.value)
    build_model("causal_lm", {"source": tiny, ours: value})  # the suggestion works


def test_min_samples_names_the_windows_and_the_value_that_keeps_the_clients(tiny, tmp_path):
    from fedsim.data.assemble import build_data

    with pytest.raises(ConfigError) as err:
        build_data(lm_config(tiny, tmp_path, "data.min_samples=100000"))
    line = str(err.value)
    assert "windows (largest first)" in line and "\n" not in line
    suggested = int(re.search(r"data.min_samples=(\d+) keeps 3", line).group(1))
    data = build_data(lm_config(tiny, tmp_path, f"data.min_samples={suggested}"))
    assert data.num_clients == 3
    with pytest.raises(ConfigError):  # one window more drops the third client
        build_data(lm_config(tiny, tmp_path, f"data.min_samples={suggested + 1}"))


def test_min_samples_hint_by_hand():
    from fedsim.data.min_samples import min_samples_hint

    packed = SimpleNamespace(next_token=True, split_gap=1)
    hint = min_samples_hint(np.array([5, 40, 12, 0, 30]), 3, packed)
    assert hint == "; its clients hold 40, 30, 12, 5 windows (largest first): " \
        "data.min_samples=12 keeps 3"  # fmt: skip
    rows = SimpleNamespace(next_token=False, split_gap=0)
    assert min_samples_hint(np.array([3, 1]), 5, rows) == "; its clients hold 3, 1 samples " \
        "(largest first)"  # fmt: skip


@pytest.mark.parametrize("algorithm", ["moon", "fedrod"])
def test_moon_and_fedrod_on_a_language_model_say_it_does_not_apply(tiny, tmp_path, algorithm):
    from fedsim.simulation import Simulation

    with pytest.raises(ConfigError) as err:
        Simulation(lm_config(tiny, tmp_path, f"algorithm.name={algorithm}"))
    line = str(err.value)
    assert line.startswith(f"algorithm.name='{algorithm}'") and "pick another algorithm" in line
    assert "add it" not in line and "def features" not in line and "lora_A" not in line


def test_label_column_on_next_token_text_is_refused(tiny, tmp_path):
    from fedsim.data.assemble import build_data

    table = tmp_path / "lines.csv"
    with table.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerows([["text", "mood"], *[["To be, or not to be", "calm"]] * 8])
    with pytest.raises(ConfigError, match=r"^data.label_column='mood': model.name=causal_lm "
                       "predicts the next token and reads no label"):  # fmt: skip
        build_data(lm_config(tiny, tmp_path, f"data.name=hf:{table}", "data.input_column=text",
                             "data.label_column=mood"))  # fmt: skip
