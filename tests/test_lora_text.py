"""Text of an ``hf:`` dataset for pretrained language models (``fedsim/data/hf/text.py``):
a text column tokenized by the model's tokenizer for next-token prediction (``causal_lm``)
or classification by a label column (``sequence_classifier``, whose head trains and travels
with the adapter), natural clients by a column, the tokens cached as a conversion; and the
tokenizer keys refused in one line where nothing would read them.

A parquet table written here and the tiny random Llama of ``lora_fixtures.py``; the same
xdist group as ``test_lora_adapters.py``, so ``transformers`` is imported once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import untimed
from lora_fixtures import HIDDEN, TEXT, build_tiny_model, lora_params

from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment

pytestmark = pytest.mark.xdist_group("lora")

RANK = 2
SPEAKERS = ("ann", "bob", "cy")
WORDS = " ".join(TEXT).split()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-llama")))


def rows(n: int = 48) -> list[dict]:
    """Lines of a few words, a speaker and a mood each; the speakers take turns."""
    return [{"text": " ".join(WORDS[(3 * i) % 20 : (3 * i) % 20 + 3 + i % 6]),
             "speaker": SPEAKERS[i % 3], "mood": ("calm", "wild")[(i // 3) % 2], "n": i}
            for i in range(n)]  # fmt: skip


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path_factory.mktemp("hf-text") / "lines.parquet"
    pq.write_table(pa.Table.from_pylist(rows()), path)
    return str(path)


def text_config(tiny: str, table: str, root: Path, *overrides: str):
    return load_config("configs/quickstart.yaml", [
        "runtime.executor=local", f"data.name=hf:{table}", "data.input_column=text",
        "data.partition.name=natural", "data.partition.by=speaker", "data.num_clients=3",
        "data.min_samples=4", "data.max_length=6", f"data.root={root}", "model.name=causal_lm",
        f"model.args={{source: {tiny}, rank: {RANK}}}", "rounds=2", "client.batch_size=4",
        "client.optimizer=adam", "client.lr=0.01", *overrides,
    ])  # fmt: skip


def history(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_text_column_predicts_next_tokens_per_speaker_and_is_cached(tiny, table, tmp_path):
    from fedsim.data import hf
    from fedsim.data.assemble import build_data
    from fedsim.pretrained import load_tokenizer

    cfg = text_config(tiny, table, tmp_path / "data")
    run_experiment(cfg, tmp_path / "run", progress=False, report=False)
    last = history(tmp_path / "run")[-1]
    assert last["perplexity"] == pytest.approx(math.exp(last["loss"]))
    partition = json.loads((tmp_path / "run" / "partition.json").read_text())["partition"]
    assert sorted(c["speaker"] for c in partition["clients"]) == list(SPEAKERS)
    assert partition["data"]["tokenized"]["task"] == "next_token"
    # packed per speaker: each speaker's lines (and end-of-text tokens) in windows of 7
    # tokens that share none, so a random train/test split leaks no target
    data = build_data(cfg)
    tokenizer = load_tokenizer("model.args.source", tiny)
    for client, info in zip(data.clients, partition["clients"], strict=True):
        lines = [r["text"] for r in rows() if r["speaker"] == info["speaker"]]
        tokens = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) + 1 for t in lines)
        assert len(client.train) + len(client.test) == tokens // 7
    x, y = data.batch(np.concatenate([data.clients[0].train, data.clients[0].test]))
    assert x.shape == y.shape == (len(x), 6) and torch.equal(x[:, 1:], y[:, :-1])
    # cached under data.root once the run was accepted; read back, the same samples
    entries = list((tmp_path / "data" / "hf-cache").iterdir())
    assert len(entries) == 1
    hf.load_hf.cache_clear()
    again = build_data(cfg)
    assert np.array_equal(again.dataset.tokens, data.dataset.tokens)
    assert again.partition["data"]["digest"] == partition["data"]["digest"]
    # the tokenizer's output changes with max_length: another entry, never a stale one
    other = hf.hf_source(text_config(tiny, table, tmp_path / "data", "data.max_length=5").data,
                         cfg.model)  # fmt: skip
    assert hf.load_hf(other, str(tmp_path / "data")).entry not in entries


def test_padded_rows_and_classes_keep_their_rows_groups_and_splits(tiny, table):
    import datasets

    from fedsim.data.hf.text import CLASSIFY, NEXT_TOKEN, LabelledTokens, TextSpec, tokenize_table

    frame = datasets.Dataset.from_list(rows(12))
    groups = np.array([r["speaker"] for r in rows(12)], dtype=object)
    padded = TextSpec(tiny, "data.tokenizer", 4, False, NEXT_TOKEN)
    data, sample_groups, train = tokenize_table(padded, "t", frame, "text", None, 1, groups, 9)
    assert len(data) == 12 and list(sample_groups) == list(groups) and train == 9
    x, y = data.batch(np.arange(12))
    assert ((y != -100).sum(1) == torch.from_numpy(data.lengths - 1)).all()
    labels = np.array([r["n"] % 3 for r in rows(12)])
    spec = TextSpec(tiny, "data.tokenizer", 4, False, CLASSIFY)
    data, _, _ = tokenize_table(spec, "t", frame, "text", labels, 3, groups, None)
    assert isinstance(data, LabelledTokens) and not data.next_token
    x, y = data.subset(np.arange(5, 12)).batch(np.arange(7))
    assert x.shape == (7, 4) and y.tolist() == labels[5:].tolist()
    assert ((x >= 0).sum(1) == torch.from_numpy(data.lengths[5:])).all()  # padding on the right
    assert data.model_kwargs()["num_classes"] == 3


def test_the_sequence_classifier_trains_its_head_and_adapter(tiny, table, tmp_path):
    """FedPer with the top block personal: the head stays on each client, the adapter of
    both layers travels; accuracy is by the label column, no perplexity."""
    from lightning_modules.sequence_classifier import SequenceClassifier

    head = HIDDEN * 2 + 2  # a Linear to the two moods
    module = SequenceClassifier(num_classes=2, source=tiny, rank=RANK)
    assert module.block_names[-1] == "head" and len(module.block_names) == 3
    with pytest.raises(ConfigError, match="predicts next tokens"):  # shakespeare-lm's shapes
        SequenceClassifier(vocab_size=300, seq_len=6, num_classes=300, source=tiny)
    cfg = text_config(tiny, table, tmp_path / "data", "model.name=sequence_classifier",
                      "data.label_column=mood", "algorithm.name=fedper",
                      "algorithm.personal_layers=1")  # fmt: skip
    result = run_experiment(cfg, tmp_path / "run", progress=False, report=False)
    records = history(tmp_path / "run")
    assert records[0]["bytes_up"] == 3 * 4 * lora_params(RANK)
    assert all(0 <= r["acc_weighted"] <= 1 and "perplexity" not in r for r in records)
    personal = [result.client_store.get(c)["personal"] for c in result.client_store.clients()]
    assert all(p.numel() == head for p in personal)
    assert not torch.equal(personal[0], personal[1])  # each client trained its own head
    header = (tmp_path / "run" / "clients.csv").read_text().splitlines()[0]
    assert "perplexity" not in header.split(",")


@pytest.mark.parametrize(
    ("overrides", "key", "says"),
    [
        (["model.name=sequence_classifier", "data.label_column=mood", "data.packing=true"],
         "data.packing", "one row at a time"),
        (["data.input_column=n", "data.max_length=8"], "data.max_length", "holds"),
        (["data.input_column=n", "data.max_length=null"], "data.input_column", "reads text"),
        (["model.name=mlp", "data.input_column=n", "data.label_column=mood"],
         "data.max_length", "acts only on a text column tokenized"),
    ],
)  # fmt: skip
def test_tokenizing_keys_where_nothing_reads_them_are_one_line(
    tiny, table, tmp_path, overrides, key, says
):
    with pytest.raises(ConfigError, match=says) as err:
        run_experiment(text_config(tiny, table, tmp_path / "data", *overrides), tmp_path / "run",
                       progress=False, report=False)  # fmt: skip
    assert err.value.key == key and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()


def test_the_driver_builds_its_template_without_the_base_to_the_same_bits(
    tiny, table, tmp_path, monkeypatch
):
    """The driver runs no model: its template is the base's structure on the meta device
    with the adapter on the CPU (no weight loaded), the same initial adapter to the bit and
    the same run as a template over the real weights."""
    from fedsim import pretrained, simulation

    cfg = text_config(tiny, table, tmp_path / "data", "algorithm.name=ditto")
    loaded = []
    real = pretrained._frozen_base
    monkeypatch.setattr(pretrained, "_frozen_base", lambda *a: loaded.append(a) or real(*a))
    light = simulation.Simulation(cfg)
    assert loaded == []  # the driver read the model's config, not its weights
    lean = run_experiment(cfg, tmp_path / "lean", simulation=light, progress=False, report=False)
    assert loaded  # the (local) worker did
    monkeypatch.setattr(simulation.Simulation, "template_weights", True)  # an argument now
    full = simulation.Simulation(cfg)
    assert torch.equal(light.initial_params, full.initial_params)
    whole = run_experiment(cfg, tmp_path / "full", simulation=full, progress=False, report=False)
    for key in whole.state:
        assert torch.equal(lean.state[key], whole.state[key]), key
    assert untimed(history(tmp_path / "lean")) == untimed(history(tmp_path / "full"))


@pytest.mark.parametrize(("name", "args"), [
    ("causal_lm", {}), ("causal_lm", {"dtype": "bfloat16"}),
    ("sequence_classifier", {"num_classes": 3}),
    ("causal_lm", {"adapter_variant": "residual"}), ("causal_lm", {"adapter_variant": "personal"}),
    ("sequence_classifier", {"num_classes": 3, "adapter_variant": "personal"}),
    ("causal_lm", {"adapter_variant": "scaled"}),
])  # fmt: skip
def test_a_template_without_weights_holds_the_same_initial_adapter_bits(name, args, tiny):
    """``weights=False`` (the driver's template, passed as an argument) gives the initial
    adapter of the model over the real weights to the bit, in every dtype, model and variant."""
    from lightning_modules.flat_params import flatten_module
    from lightning_modules.registry import build_model

    flats = []
    for weights in (True, False):
        torch.manual_seed(0)
        module = build_model(name, {"source": tiny, "rank": RANK}, weights=weights, **args)
        flats.append(flatten_module(module))
        assert any(p.is_meta for p in module.parameters()) is not weights
    assert torch.equal(flats[0], flats[1])


def test_what_fedsim_sets_is_refused_in_model_args_and_a_variant_needs_an_adapted_model(tiny):
    """``adapter_variant`` (the algorithm's declaration) and ``weights`` (the driver's
    template) come from fedsim, never model.args; a model without adapters asked for a
    variant is refused naming the models that build one."""
    from lightning_modules.registry import build_model

    for key, value in (("adapter_variant", "personal"), ("weights", False)):
        with pytest.raises(ConfigError, match="fedsim sets it") as err:
            build_model("causal_lm", {"source": tiny, key: value})
        assert err.value.key == f"model.args.{key}" and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="model.name=causal_lm") as err:
        build_model("mlp", {}, in_channels=1, num_classes=2, image_size=4,
                    adapter_variant="residual")  # fmt: skip
    assert err.value.key == "model.name" and "\n" not in str(err.value)
