"""data.name=hf:<local path>: FEMNIST's schema (from real mnist-5k digits) saved with
save_to_disk and as parquet, a CSV tabular set; natural clients by a column, fedsim's own
partitions on them, whole runs on the local executor, and the one-line errors. Offline."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import one_line_error
from hf_fixtures import (
    FEMNIST_CHARACTERS,
    WRITER_SIZES,
    femnist_rows,
    save_femnist,
    save_tabular_csv,
)

from fedsim.cli import main
from fedsim.config import load_config
from fedsim.data.hf import HFSource, load_hf
from fedsim.simulation import build_data

NATURAL = ["data.label_column=character", "data.partition.name=natural",
           "data.partition.by=writer_id", "data.min_samples=10"]  # fmt: skip
# converted datasets are cached under data.root: a temporary one here, not the repo's data/
ROOT = Path(tempfile.mkdtemp(prefix="fedsim-hf-root-"))
atexit.register(shutil.rmtree, ROOT, True)
TINY = ["rounds=1", "runtime.executor=local", "client.batch_size=20", "--no-progress",
        f"data.root={ROOT}"]  # fmt: skip


@pytest.fixture(scope="module")
def femnist(tmp_path_factory) -> tuple[Path, Path]:
    return save_femnist(tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="module")
def tabular(tmp_path_factory) -> Path:
    return save_tabular_csv(tmp_path_factory.mktemp("csv") / "rows.csv")


def _config(*overrides: str):
    return load_config(
        "configs/quickstart.yaml", ["runtime.executor=local", f"data.root={ROOT}", *overrides]
    )


@pytest.mark.parametrize("kind", ["save_to_disk", "parquet"])
def test_femnist_schema_reads_as_grey_28x28_digits_with_62_classes(femnist, kind):
    path = femnist[0 if kind == "save_to_disk" else 1]
    hf = load_hf(HFSource(f"hf:{path}", label_column="character", by="writer_id"))
    pixels, labels, writers = femnist_rows()
    assert hf.dataset.images.shape == (240, 1, 28, 28)
    np.testing.assert_array_equal(hf.dataset.images[:, 0], pixels)
    np.testing.assert_array_equal(hf.dataset.labels, labels)
    assert hf.dataset.num_classes == 62 and hf.info["label_names"] == FEMNIST_CHARACTERS
    assert list(hf.groups) == list(writers)


@pytest.mark.parametrize("kind", ["save_to_disk", "parquet"])
def test_natural_partition_gives_one_client_per_writer_with_exactly_its_samples(femnist, kind):
    path = femnist[0 if kind == "save_to_disk" else 1]
    data = build_data(_config(f"data.name=hf:{path}", "data.num_clients=4", *NATURAL))
    pixels, labels, writers = femnist_rows()
    ids = [c["writer_id"] for c in data.partition["clients"]]
    assert ids == list(WRITER_SIZES)  # largest first
    assert data.partition["data"]["label_names"] == FEMNIST_CHARACTERS
    for client, writer in zip(data.clients, ids, strict=True):
        rows = np.flatnonzero(writers == writer)
        mine = np.sort(client.all)
        assert len(mine) == WRITER_SIZES[writer] and len(client.test) > 0
        np.testing.assert_array_equal(data.dataset.images[mine, 0], pixels[rows])
        np.testing.assert_array_equal(data.dataset.labels[mine], labels[rows])
        assert len(client.train) == int(0.75 * len(rows))  # data.train_ratio


def test_natural_partition_keeps_the_largest_num_clients_above_min_samples(femnist):
    data = build_data(_config(f"data.name=hf:{femnist[0]}", "data.num_clients=2", *NATURAL,
                              "data.min_samples=60"))  # fmt: skip
    assert [c["writer_id"] for c in data.partition["clients"]] == ["f0003_11", "f0001_42"]
    assert len(data.dataset) == 160 and data.partition["clients_available"] == 2


@pytest.mark.parametrize("partition", ["iid", "dirichlet", "pathological"])
def test_fedsims_own_partitions_work_on_an_hf_dataset(femnist, partition):
    cfg = _config(f"data.name=hf:{femnist[1]}", "data.num_clients=4",
                  "data.label_column=character", f"data.partition.name={partition}",
                  *(["data.partition.alpha=1.0"] if partition == "dirichlet" else []))  # fmt: skip
    data = build_data(cfg)
    assert data.num_clients == 4 and int(data.train_sizes().sum() + data.test_sizes().sum()) > 0
    assert data.partition["name"] == partition


def test_csv_rows_are_tabular_with_string_labels_mapped_to_ids(tabular):
    cfg = _config(f"data.name=hf:{tabular}", "data.input_column=[f0,f1,f2,f3]",
                  "data.partition.name=natural", "data.partition.by=site",
                  "data.num_clients=3", "data.min_samples=10", "model.name=mlp")  # fmt: skip
    data = build_data(cfg)
    assert data.dataset.features.shape == (240, 4)
    assert data.partition["data"]["label_names"] == ["east", "north", "south", "west"]
    assert sorted(c["site"] for c in data.partition["clients"]) == ["s0", "s1", "s2"]
    x, y = data.batch(np.arange(5))
    assert tuple(x.shape) == (5, 4) and y.max() < 4


def _run(tmp_path: Path, *overrides: str) -> dict:
    out = tmp_path / "run"
    assert main(["run", "configs/quickstart.yaml", *TINY, *overrides, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    partition = json.loads((out / "partition.json").read_text())
    return {"summary": summary, "partition": partition}


@pytest.mark.parametrize("algorithm", ["fedavg", "fedper", "ditto"])
def test_fedavg_fedper_and_ditto_run_on_natural_femnist_writers(femnist, tmp_path, algorithm):
    run = _run(tmp_path, f"data.name=hf:{femnist[0]}", "data.num_clients=3", *NATURAL,
               f"algorithm.name={algorithm}")  # fmt: skip
    assert run["partition"]["num_clients"] == 3 and run["partition"]["num_classes"] == 62
    assert run["partition"]["partition"]["data"]["label_names"][:3] == ["0", "1", "2"]
    assert run["summary"]


def test_fedavg_runs_on_the_parquet_copy_with_a_dirichlet_partition(femnist, tmp_path):
    run = _run(tmp_path, f"data.name=hf:{femnist[1]}", "data.num_clients=4",
               "data.label_column=character", "data.partition.name=dirichlet",
               "data.partition.alpha=1.0")  # fmt: skip
    assert run["partition"]["partition"]["name"] == "dirichlet"


def test_mlp_runs_on_csv_rows_with_natural_sites(tabular, tmp_path):
    run = _run(tmp_path, f"data.name=hf:{tabular}", "data.input_column=[f0,f1,f2,f3]",
               "data.partition.name=natural", "data.partition.by=site", "data.num_clients=3",
               "data.min_samples=10", "model.name=mlp", "model.hidden=[16]")  # fmt: skip
    assert run["partition"]["num_classes"] == 4


# ------------------------------------------------------------------ one-line errors


def _refused(tmp_path: Path, capsys, *overrides: str) -> str:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    config = Path("configs/quickstart.yaml").resolve()
    argv = ["run", str(config), "--check", "--no-progress", "runtime.executor=local", *overrides]
    return one_line_error(argv, capsys, work)


def test_a_missing_column_lists_the_columns(femnist, tmp_path, capsys):
    err = _refused(tmp_path, capsys, f"data.name=hf:{femnist[0]}")  # label_column=label
    assert (
        "data.label_column='label': no such column; the columns are: image, writer_id, "
        "character, hsf_id" in err
    )
    err = _refused(tmp_path, capsys, f"data.name=hf:{femnist[0]}", *NATURAL[:2],
                   "data.partition.by=writer")  # fmt: skip
    assert "data.partition.by='writer': no such column" in err


def test_labels_that_are_not_classes_are_refused(tmp_path, capsys):
    csv = tmp_path / "bad.csv"
    csv.write_text("f0,label\n0.1,0.5\n0.2,1\n0.3,2\n")
    err = _refused(tmp_path, capsys, f"data.name=hf:{csv}", "data.input_column=f0")
    assert "data.label_column='label': holds 0.5, not a class" in err


def test_fewer_writers_than_num_clients_is_refused(femnist, tmp_path, capsys):
    err = _refused(tmp_path, capsys, f"data.name=hf:{femnist[0]}", "data.num_clients=5", *NATURAL)
    assert "data.num_clients=5: data.partition.by=writer_id has 4 values with >= 10" in err


def test_a_hub_id_says_this_machine_cannot_reach_the_hub(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    err = _refused(tmp_path, capsys, "data.name=hf:flwrlabs/femnist")
    assert "cannot reach the Hugging Face Hub" in err and "pass that local path" in err


def test_images_of_mixed_sizes_need_data_resize(tmp_path, capsys):
    import datasets
    from PIL import Image

    pixels, labels, _ = femnist_rows()
    images = [Image.new("L", (32, 32), 7)] * 10 + [Image.fromarray(p) for p in pixels[10:20]]
    mixed = datasets.Dataset.from_dict(
        {"image": images, "character": [int(y) for y in labels[:20]]},
        features=datasets.Features(
            {"image": datasets.Image(), "character": datasets.Value("int64")}
        ),
    )
    mixed.save_to_disk(str(tmp_path / "mixed"))
    capsys.readouterr()  # datasets' progress bars
    name = f"data.name=hf:{tmp_path / 'mixed'}"
    err = _refused(tmp_path, capsys, name, "data.label_column=character")
    assert "data.resize=null: the images of image are 28x28, 32x32, not one square size" in err
    hf = load_hf(HFSource(name[len("data.name=") :], label_column="character", resize=28))
    assert hf.dataset.images.shape == (20, 1, 28, 28)


def test_a_refused_run_writes_nothing(femnist, tmp_path, capsys):
    out = tmp_path / "run"
    args = [*TINY, f"data.name=hf:{femnist[0]}", "data.num_clients=9", *NATURAL]
    assert main(["run", "configs/quickstart.yaml", *args, "--out", str(out)]) == 2
    assert "data.num_clients=9" in capsys.readouterr().err and not out.exists()


def test_hf_keys_without_an_hf_dataset_are_refused(tmp_path, capsys):
    err = _refused(tmp_path, capsys, "data.label_column=character")
    assert "acts only with data.name=hf:<local path>" in err


def test_the_shipped_femnist_config_runs_on_a_local_copy(femnist, tmp_path, capsys):
    args = [f"data.name=hf:{femnist[0]}", "data.num_clients=3", "data.min_samples=10",
            "rounds=1", "runtime.executor=local", "--check"]  # fmt: skip
    assert main(["run", "configs/hf/femnist-natural-fedavg.yaml", *args]) == 0
    assert "3 clients" in capsys.readouterr().out


def test_a_resumed_run_on_natural_writers_equals_the_uninterrupted_one(femnist, tmp_path):
    import torch
    from helpers import untimed

    from fedsim.experiment import run_experiment

    def run(out: Path, rounds: int, resume: bool = False):
        cfg = _config(f"data.name=hf:{femnist[1]}", "data.num_clients=4", *NATURAL,
                      "algorithm.name=fedper", "join_ratio=0.5", "checkpoint_every=2",
                      f"rounds={rounds}", "client.batch_size=20")  # fmt: skip
        return run_experiment(cfg, out, progress=False, report=False, resume=resume)

    def metrics(out: Path) -> list[dict]:
        lines = (out / "metrics.jsonl").read_text().splitlines()
        return untimed([json.loads(line) for line in lines])

    straight = run(tmp_path / "straight", 4)
    run(tmp_path / "resumed", 2)
    resumed = run(tmp_path / "resumed", 4, resume=True)
    for key in straight.state:
        assert torch.equal(straight.state[key], resumed.state[key]), key
    for client in straight.client_store.clients():
        a, b = straight.client_store.get(client), resumed.client_store.get(client)
        assert all(torch.equal(a[k], b[k]) for k in a), client
    assert metrics(tmp_path / "resumed") == metrics(tmp_path / "straight")


@pytest.fixture(scope="module")
def celeba(tmp_path_factory) -> Path:
    from hf_fixtures import save_celeba

    return save_celeba(tmp_path_factory.mktemp("celeba"))


@pytest.fixture(scope="module")
def shakespeare(tmp_path_factory) -> Path:
    from hf_fixtures import save_shakespeare

    return save_shakespeare(tmp_path_factory.mktemp("shakespeare"))[0]


@pytest.mark.parametrize("data", ["femnist", "tabular", "celeba", "shakespeare"])
def test_the_ray_pool_equals_the_local_executor_on_hf_data(
    femnist, tabular, celeba, shakespeare, data, ray_pool
):
    from helpers import run_local_and_ray, untimed

    if data == "femnist":
        keys = [f"data.name=hf:{femnist[0]}", *NATURAL, "algorithm.name=fedper"]
    elif data == "celeba":  # LEAF's task and model on 84x84 colour
        keys = [f"data.name=hf:{celeba}", "data.label_column=Smiling", "data.resize=84",
                "data.partition.name=natural", "data.partition.by=celeb_id",
                "data.min_samples=10", "model.name=celeba_cnn"]  # fmt: skip
    elif data == "shakespeare":
        keys = [f"data.name=hf:{shakespeare}", "data.input_column=x", "data.label_column=y",
                "data.partition.name=natural", "data.partition.by=character_id",
                "data.min_samples=10", "model.name=char_lstm"]  # fmt: skip
    else:
        keys = [f"data.name=hf:{tabular}", "data.input_column=[f0,f1,f2,f3]", "model.name=mlp",
                "data.partition.name=natural", "data.partition.by=site",
                "data.min_samples=10"]  # fmt: skip
    cfg = _config(*keys, "data.num_clients=3", "rounds=2", "client.batch_size=20")
    local, ray_run = run_local_and_ray(cfg, ray_pool)
    assert untimed(ray_run.history) == untimed(local.history)


def test_natural_without_a_column_is_refused(femnist, tmp_path, capsys):
    err = _refused(tmp_path, capsys, f"data.name=hf:{femnist[0]}", *NATURAL[:2])
    assert "data.partition.name='natural': needs data.partition.by" in err
    err = _refused(tmp_path, capsys, "data.partition.name=natural")  # mnist-5k
    assert "needs data.partition.by, a column of an hf: dataset" in err


def test_data_split_picks_a_split_of_a_saved_dataset_dict(tmp_path, capsys):
    import datasets
    from hf_fixtures import femnist_dataset

    parts = femnist_dataset().train_test_split(test_size=40, seed=0)
    parts.save_to_disk(str(tmp_path / "dict"))
    capsys.readouterr()  # datasets' progress bars
    name = f"hf:{tmp_path / 'dict'}"
    assert isinstance(parts, datasets.DatasetDict)
    for split, rows in (("train", 200), ("test", 40)):
        hf = load_hf(HFSource(name, split=split, label_column="character"))
        assert len(hf.dataset) == rows and hf.info["split"] == split
    err = _refused(tmp_path, capsys, f"data.name={name}", "data.split=valid",
                   "data.label_column=character")  # fmt: skip
    assert "data.split='valid': allowed: train, test" in err


def test_celeba_schema_is_colour_images_resized_with_a_binary_attribute(tmp_path, capsys):
    from hf_fixtures import CELEB_SIZES, femnist_rows, save_celeba

    path = save_celeba(tmp_path)
    capsys.readouterr()  # datasets' progress bars
    celeba = [f"data.name=hf:{path}", "data.label_column=Smiling"]
    err = _refused(tmp_path, capsys, *celeba)
    assert "the images of image are 218x178, not one square size" in err
    by_celeb = ["data.resize=32", "data.partition.name=natural", "data.partition.by=celeb_id",
                "data.num_clients=3", "data.min_samples=10"]  # fmt: skip
    data = build_data(_config(*celeba, *by_celeb))
    assert data.dataset.images.shape == (60, 3, 32, 32) and data.num_classes == 2
    assert data.partition["data"]["label_names"] == ["False", "True"]
    assert [c["celeb_id"] for c in data.partition["clients"]] == [str(c) for c in CELEB_SIZES]
    _, digits, _ = femnist_rows()
    assert sorted(data.dataset.labels.tolist()) == sorted((digits[:60] % 2 == 0).tolist())
    run = _run(tmp_path, *celeba, *by_celeb)
    assert run["partition"]["num_classes"] == 2


def test_shakespeare_schema_is_char_windows_for_the_char_lstm(tmp_path):
    from hf_fixtures import SPEECHES, save_shakespeare

    from fedsim.data.text import decode

    path, counts = save_shakespeare(tmp_path)
    text = [f"data.name=hf:{path}", "data.input_column=x", "data.label_column=y",
            "data.partition.name=natural", "data.partition.by=character_id",
            "data.num_clients=3", "data.min_samples=10", "model.name=char_lstm"]  # fmt: skip
    data = build_data(_config(*text))
    assert [c["character_id"] for c in data.partition["clients"]] == list(SPEECHES)
    assert [len(c.all) for c in data.clients] == list(counts.values())
    first = np.sort(data.clients[0].all)[:1]
    x, y = data.batch(first)
    assert tuple(x.shape) == (1, 80) and decode(x[0].numpy()) == SPEECHES["HAMLET_HAMLET"][:80]
    assert decode(y.numpy()) == SPEECHES["HAMLET_HAMLET"][80]
    run = _run(tmp_path, *text)
    assert run["partition"]["num_classes"] == 80
