"""The Debian Reference benchmark: its preparation (on a tiny fixture, and on Debian's
packages where installed), ``data.name=debian-reference``, natural clients chosen by value
(``data.partition.values``), per-client label ids (``data.permute_labels``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fedsim.config import load_config
from fedsim.data import debian_reference as dr
from fedsim.data.assemble import build_data
from fedsim.data.build import build_group_federation
from fedsim.data.client_labels import client_permutation, matching, permute_labels
from fedsim.data.dataset_types import ImageDataset
from fedsim.data.federated import ClientSplit, FederatedData
from fedsim.errors import ConfigError

PAGE = """<html><head><title>Chapter</title></head><body>
<div class="navheader"><p>Prev Next</p></div>
<div class="toc"><p><strong>Table of Contents</strong></p><dl class="toc"><dt>1.1</dt></dl></div>
<h2 class="title"><a id="x"/>1.1. A heading</h2>
<p>First {lang} paragraph with <code class="literal">apt</code>(8)
 inline.</p>
<div class="table"><table><tr><td><p>cell {lang}</p></td></tr></table></div>
<pre class="screen">$ sudo rm -rf /</pre>
<ul><li><p>Item {lang} {n}<br/>continued</p></li></ul>
<p>Last {lang} paragraph {n}.</p>
<div class="navfooter"><p>footer</p></div></body></html>"""


def _fixture(folder: Path, languages: tuple[str, ...], chapters: int) -> Path:
    for lang in languages:
        for n in range(chapters):
            name = f"ch{n + 1:02d}.{lang}.html" if n else f"pr01.{lang}.html"
            (folder / name).write_text(PAGE.format(lang=lang, n=n), encoding="utf-8")
    (folder / "index.en.html").write_text("<p>not a chapter</p>", encoding="utf-8")
    return folder


def test_paragraphs_drop_tables_code_contents_and_navigation():
    texts = dr.paragraphs(PAGE.format(lang="en", n=3))
    assert texts == [
        "First en paragraph with apt(8) inline.", "Item en 3continued", "Last en paragraph 3.",
    ]  # fmt: skip


def test_deal_chapters_balances_by_hand():
    # sizes 10, 7, 5, 4, 1 over 2 clients: 10->0, 7->1, 5->1 (7<10), 4->0 (10<12), 1->1 (12<14)
    owner = dr.deal_chapters({"a": 10, "b": 7, "c": 5, "d": 4, "e": 1}, 2)
    assert owner == {"a": 0, "b": 1, "c": 1, "d": 0, "e": 1}


def test_prepare_rows_clients_languages_and_seeded_shuffle(tmp_path):
    source = _fixture(tmp_path, ("en", "de"), chapters=4)
    rows = dr.prepare_rows(source, ("en", "de"), clients_per_language=2, seed=1)
    assert set(rows) == {"text", "language", "chapter", "client_id"}
    assert len(rows["text"]) == 2 * 4 * 3  # 3 paragraphs per page, index and table dropped
    assert sorted(set(rows["client_id"])) == ["de-0", "de-1", "en-0", "en-1"]
    for text, lang, client in zip(rows["text"], rows["language"], rows["client_id"], strict=True):
        assert f" {lang} " in text and client.startswith(f"{lang}-")
    again = dr.prepare_rows(source, ("en", "de"), 2, seed=1)
    other = dr.prepare_rows(source, ("en", "de"), 2, seed=2)
    assert again == rows and other["text"] != rows["text"]
    assert sorted(other["text"]) == sorted(rows["text"])
    with pytest.raises(ConfigError, match="clients-per-language"):
        dr.prepare_rows(source, ("en",), clients_per_language=5)
    with pytest.raises(ConfigError, match="debian-reference-\\{fr\\}"):
        dr.prepare_rows(source, ("en", "fr"))


def test_data_name_resolves_to_the_prepared_file(tmp_path):
    missing = load_config(None, ["data.name=debian-reference", f"data.root={tmp_path}"])
    with pytest.raises(ConfigError, match="data.name='debian-reference': needs .*make data"):
        build_data(missing)
    (tmp_path / "src").mkdir()
    source = _fixture(tmp_path / "src", ("en",), chapters=2)
    out = dr.write(dr.prepare_rows(source, ("en",), 1), dr.prepared_path(tmp_path))
    cfg = load_config(None, ["data.name=debian-reference", f"data.root={tmp_path}"])
    assert cfg.data.name == f"hf:{out}" and cfg.data.input_column == "text"
    assert out == tmp_path / "debian-reference" / "debian-reference.parquet"


@pytest.mark.skipif(
    not all((dr.SOURCE / f"ch01.{lang}.html").exists() for lang in dr.LANGUAGES),
    reason="Debian's debian-reference-{en,de,es,fr,it,ja,pt} are not installed (make data)",
)
def test_prepare_the_installed_packages():
    rows = dr.prepare_rows(dr.SOURCE)
    counts = {lang: rows["language"].count(lang) for lang in dr.LANGUAGES}
    assert all(count > 1000 for count in counts.values()), counts
    assert len(set(rows["client_id"])) == len(dr.LANGUAGES) * dr.CLIENTS_PER_LANGUAGE
    assert not any(text.startswith("Table of Contents") for text in rows["text"])


def test_partition_values_keep_matching_clients_only():
    groups = np.array(["en-0", "de-0", "en-1", "de-1", "en-0", "en-1", "de-0", "de-1"] * 2)
    labels = np.zeros(len(groups), np.int64)
    dataset = ImageDataset("g", np.zeros((len(groups), 1, 2, 2), np.uint8), labels, 1)
    data = build_group_federation(dataset, groups, 2, 2, 0.5, 0, "client_id", patterns=["en-*"])
    assert [c["client_id"] for c in data.partition["clients"]] == ["en-0", "en-1"]
    assert data.partition["values"] == ["en-*"]
    capped = build_group_federation(dataset, groups, 4, 2, 0.5, 0, "client_id", None, None, 3)
    assert [len(c.all) for c in capped.clients] == [3, 3, 3, 3]
    with pytest.raises(ConfigError, match="data.partition.values"):
        matching(np.array(["en-0"]), ["fr-*"])
    with pytest.raises(ConfigError, match="data.num_clients"):
        build_group_federation(dataset, groups, 3, 2, 0.5, 0, "client_id", patterns=["en-*"])


def test_permute_labels_gives_each_client_its_own_map():
    labels = np.array([0, 1, 2, 3, 0, 1, 2, 3, 3, 2], np.int64)
    dataset = ImageDataset("p", np.zeros((10, 1, 2, 2), np.uint8), labels, 4)
    a = ClientSplit(train=np.array([0, 1, 2]), test=np.array([3]))
    b = ClientSplit(train=np.array([4, 5, 6]), test=np.array([7]))
    c = ClientSplit(train=np.array([8]), test=np.array([9]))
    data = FederatedData(dataset, [a, b], {"name": "x"}, newcomers=[c])
    out = permute_labels(data, seed=3)
    for client, split in enumerate([a, b, c]):
        perm = client_permutation(4, 3, client)
        assert sorted(perm.tolist()) == [0, 1, 2, 3]
        np.testing.assert_array_equal(out.dataset.labels[split.all], perm[labels[split.all]])
        assert out.partition["label_permutations"][client] == perm.tolist()
    maps = {tuple(client_permutation(4, 3, k)) for k in range(3)}
    assert len(maps) > 1  # clients differ
    np.testing.assert_array_equal(dataset.labels, labels)  # the original is left as it was
    one_class = FederatedData(ImageDataset("q", dataset.images, labels * 0, 1), [a])
    with pytest.raises(ConfigError, match="data.permute_labels"):
        permute_labels(one_class, 0)


def test_partition_values_need_a_natural_partition():
    with pytest.raises(ConfigError, match="data.partition.values"):
        load_config(None, ["data.partition.values=[en-*]"])


def test_the_benchmark_command_runs_every_part_with_its_control(tmp_path, capsys):
    from benchmarks.debian_reference import PARTS, command, main

    table = command("table", [0, 1], tmp_path, ["rounds=2"])
    configs = [a for a in table if a.startswith("configs/debian/")]
    assert len(configs) == 9 and "configs/debian/lm-fedper.yaml" in configs
    control = command("control", [0], tmp_path, [])
    assert "data.partition.values=[en-*]" in control and str(tmp_path / "debian-control") in control
    assert "data.permute_labels=false" in command("cls-control", [0], tmp_path, [])
    for part in PARTS:  # every config of every part loads with the part's overrides
        line = command(part, [0], tmp_path, [])
        overrides = [a for a in line if "=" in a]
        for config in (a for a in line if a.endswith(".yaml")):
            load_config(Path(__file__).resolve().parents[1] / config, overrides)
    assert main(["table", "--dry-run", "--seeds", "0"]) == 0
    assert "ray_jobs.reproduce" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["tabel", "--dry-run"])


def test_holdout_names_hold_out_the_clients_of_those_names():
    from fedsim.data.holdout import hold_out, named_ids

    groups = np.array(["en-0", "en-1", "de-0", "de-1"] * 3)
    dataset = ImageDataset("h", np.zeros((12, 1, 2, 2), np.uint8), np.zeros(12, np.int64), 1)
    data = build_group_federation(dataset, groups, 4, 2, 0.5, 0, "client_id")
    order = [c["client_id"] for c in data.partition["clients"]]
    ids = named_ids(data.partition, ["*-1"])
    assert sorted(order[i] for i in ids) == ["de-1", "en-1"]
    held = hold_out(data, 0, seed=0, ids=ids)
    assert len(held.clients) == 2 and len(held.newcomers) == 2
    names = [c["client_id"] for c in held.partition["clients"]]
    assert sorted(names[2:]) == ["de-1", "en-1"] and sorted(names[:2]) == ["de-0", "en-0"]
    with pytest.raises(ConfigError, match="eval.holdout_names.*matches every client"):
        named_ids(data.partition, ["*"])
    with pytest.raises(ConfigError, match="eval.holdout_names.*matches none"):
        named_ids(data.partition, ["fr-*"])
    with pytest.raises(ConfigError, match="eval.holdout_names.*natural"):
        named_ids({"name": "iid"}, ["*-1"])
    with pytest.raises(ConfigError, match="eval.holdout_names"):
        load_config(None, ["eval.holdout_names=[a]", "eval.holdout_clients=2"])


def test_the_tune_step_picks_each_lr_on_validation_and_feeds_the_table(tmp_path, capsys):
    import json

    from benchmarks.debian_reference import command, main
    from benchmarks.debian_tune import GRID, TUNE_SEED, choose, lr_name, tune_markdown

    line = command("tune", [0, 1], tmp_path, [], ["fedavg", "ditto"])
    grid = [a for a in line if a.endswith(".yaml")]
    assert len(grid) == 2 * len(GRID) and line[line.index("--seeds") + 1] == str(TUNE_SEED)
    assert "--reference" not in line and not any(a.startswith("rounds=") for a in line)
    cfg = load_config(grid[1], [])  # its budget: in the config, one round
    assert cfg.client.lr == GRID[1] and cfg.algorithm.name == "ditto" and cfg.rounds == 1
    dpa = [a for a in command("tune", [0], tmp_path / "dpa", [], ["feddpa"]) if ".yaml" in a]
    assert [load_config(c, []).rounds for c in dpa] == [2] * len(GRID)  # its personal pass: r1
    assert cfg.name == f"debian-lm-ditto-lr{lr_name(GRID[1])}"
    runs = tmp_path / "debian-tune" / "runs"
    losses = {"lm-ditto": (4.0, 3.5, 3.9), "lm-fedavg": (4.2, 4.3, math.nan)}
    for stem, values in losses.items():  # by hand: ditto's lowest at GRID[1], fedavg's at [0]
        for lr, loss in zip(GRID, values, strict=True):
            if math.isnan(loss):
                continue  # a run that did not finish takes no part
            folder = runs / f"{stem}-lr{lr_name(lr)}-seed{TUNE_SEED}"
            folder.mkdir(parents=True)
            summary = {"selected_on": "validation", "best": {"val/loss": loss, "loss": 0.0}}
            (folder / "summary.json").write_text(json.dumps(summary))
    chosen = choose(runs, ["lm-ditto", "lm-fedavg"])
    assert chosen["lm-ditto"]["lr"] == GRID[1] and chosen["lm-fedavg"]["lr"] == GRID[0]
    assert f"| lm-ditto | 4.0000 | 3.5000 | 3.9000 | {GRID[1]:g} |" in tune_markdown(chosen, "b")
    from benchmarks.debian_reference import after_tune

    after_tune(tmp_path, ["fedavg", "ditto"], 12.0, 34.0)
    assert "for 1 round on seed 100, 12 CPU-s" in (tmp_path / "debian-tune" / "tune.md").read_text()
    capsys.readouterr()
    table = command("table", [0], tmp_path, [], ["fedavg", "ditto", "local"])
    tuned = [a for a in table if a.endswith(".yaml")]
    assert tuned[0] == str(tmp_path / "debian-tune" / "configs" / "lm-ditto.yaml")
    assert tuned[2] == "configs/debian/lm-local.yaml"  # not tuned: as shipped, and said so
    notes = capsys.readouterr().out.splitlines()
    assert len(notes) == 1 and notes[0].startswith("note: lm-local.yaml runs at its shipped lr")
    ditto = load_config(tuned[0], [])
    assert (ditto.client.lr, ditto.name) == (GRID[1], "debian-lm-ditto")
    assert main(["tune", "table", "--dry-run", "--methods", "fedavg", "--out",
                 str(tmp_path)]) == 0  # fmt: skip


def test_a_part_counts_the_cpu_time_of_its_runs(tmp_path):
    from benchmarks.debian_reference import runs_cpu

    (tmp_path / "runs.csv").write_text("config,seed,cpu_s\na.yaml,0,12.5\na.yaml,1,\nb.yaml,0,30\n")
    assert runs_cpu(tmp_path) == 42.5 and runs_cpu(tmp_path / "none") == 0.0
