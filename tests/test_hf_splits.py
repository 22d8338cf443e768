"""A dataset's own per-client train/test splits (``data.test_split``) and image folders
(a class per folder, natural clients from a metadata.csv column). Offline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import stderr_lines
from hf_fixtures import femnist_dataset

from fedsim.cli import main
from fedsim.config import load_config
from fedsim.simulation import build_data

NATURAL = ["data.label_column=character", "data.partition.name=natural",
           "data.partition.by=writer_id", "data.min_samples=10", "data.num_clients=3"]  # fmt: skip


@pytest.fixture(scope="module")
def own_splits(tmp_path_factory) -> tuple[Path, object]:
    """FEMNIST's schema saved as a DatasetDict whose test split holds each writer's last
    quarter of rows (the way LEAF keeps a user's own test samples)."""
    import datasets

    table = femnist_dataset()
    writers = np.asarray(table["writer_id"])
    test = np.zeros(len(writers), dtype=bool)
    for writer in np.unique(writers):
        rows = np.flatnonzero(writers == writer)
        test[rows[-len(rows) // 4 :]] = True
    parts = datasets.DatasetDict(
        train=table.select(np.flatnonzero(~test)), test=table.select(np.flatnonzero(test))
    )
    folder = tmp_path_factory.mktemp("splits") / "femnist"
    parts.save_to_disk(str(folder))
    return folder, parts


def only_line(capsys) -> str:
    """The one stderr line of a refused run (datasets' own progress output aside)."""
    lines = [line for line in stderr_lines(capsys.readouterr().err) if "fedsim: error" in line]
    assert len(lines) == 1, lines
    return lines[0]


def config(folder: Path, *extra: str, root: Path):
    return load_config(None, [f"data.name=hf:{folder}", f"data.root={root}", *NATURAL, *extra])


def test_each_client_tests_on_exactly_its_rows_of_the_test_split(own_splits, tmp_path):
    folder, parts = own_splits
    data = build_data(config(folder, "data.test_split=test", root=tmp_path))
    train_rows = len(parts["train"])
    assert data.partition["data"]["train_rows"] == train_rows
    assert "train_ratio" not in data.partition and "test_split" in data.partition
    for k, record in enumerate(data.partition["clients"]):
        writer = record["writer_id"]
        split = data.clients[k]
        expected_test = sum(1 for w in parts["test"]["writer_id"] if w == writer)
        expected_train = sum(1 for w in parts["train"]["writer_id"] if w == writer)
        assert (len(split.train), len(split.test)) == (expected_train, expected_test)
        # the test rows are that writer's rows of the test split, image for image
        test_images = np.stack([np.asarray(img) for img, w in
                                zip(parts["test"]["image"], parts["test"]["writer_id"],
                                    strict=True) if w == writer])  # fmt: skip
        assert np.array_equal(data.dataset.images[np.sort(split.test), 0], test_images)


def test_without_test_split_the_rows_are_split_by_train_ratio(own_splits, tmp_path):
    folder, parts = own_splits
    data = build_data(config(folder, root=tmp_path))
    chosen = sum(r["samples"] for r in data.partition["clients"])  # only data.split's rows
    assert sum(len(c.train) + len(c.test) for c in data.clients) == chosen == len(data.dataset)
    assert chosen < len(parts["train"]) and data.partition["train_ratio"] == 0.75


def test_a_run_on_the_datas_own_splits_ends_with_finite_accuracy(own_splits, tmp_path):
    folder, _ = own_splits
    out = tmp_path / "run"
    args = ["run", "configs/quickstart.yaml", f"data.name=hf:{folder}", f"data.root={tmp_path}",
            *NATURAL, "data.test_split=test", "rounds=1", "runtime.executor=local",
            "client.batch_size=20", "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert 0.0 <= summary["final"]["acc_weighted"] <= 1.0


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["data.test_split=valid"], "data.test_split='valid': allowed: train, test"),
        (["data.test_split=train"], "data.test_split='train': is data.split"),
        (["data.test_split=test", "data.train_ratio=0.5"],
         "data.train_ratio=0.5: acts only with data.test_split=null"),
    ],
)  # fmt: skip
def test_bad_test_splits_are_one_line(own_splits, tmp_path, capsys, extra, needle):
    folder, _ = own_splits
    args = ["run", "configs/quickstart.yaml", f"data.name=hf:{folder}", f"data.root={tmp_path}",
            *NATURAL, *extra, "--check"]  # fmt: skip
    assert main(args) == 2
    assert needle in only_line(capsys)


def test_test_split_needs_natural_clients(own_splits, tmp_path, capsys):
    folder, _ = own_splits
    args = ["run", "configs/quickstart.yaml", f"data.name=hf:{folder}", "data.test_split=test",
            "data.label_column=character", "--check"]  # fmt: skip
    assert main(args) == 2
    assert "data.test_split='test': acts only with data.partition.name=natural" in only_line(capsys)


def test_an_image_folder_with_natural_clients_from_its_metadata(tmp_path):
    """``train/<class>/<file>.png`` plus a metadata.csv naming each file's client: datasets'
    imagefolder layout. With a metadata file datasets reads the class from it, not from the
    folder names, so the file has a label column too."""
    from PIL import Image

    from fedsim.data.datasets import _mnist_5k_arrays

    images, labels = _mnist_5k_arrays()
    root = tmp_path / "folder"
    lines = ["file_name,label,site"]
    for i in range(0, 5000, 40):  # 125 digits, every class
        name = f"train/digit{labels[i]}/{i}.png"
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[i, 0], mode="L").save(root / name)
        lines.append(f"{name.removeprefix('train/')},digit{labels[i]},site{i % 3}")
    (root / "train" / "metadata.csv").write_text("\n".join(lines) + "\n")
    cfg = load_config(None, [f"data.name=hf:{root}", f"data.root={tmp_path}",
                             "data.partition.name=natural", "data.partition.by=site",
                             "data.num_clients=3", "data.min_samples=10"])  # fmt: skip
    data = build_data(cfg)
    assert data.dataset.images.shape[1:] == (1, 28, 28) and data.num_classes == 10
    assert data.partition["data"]["label_names"][:2] == ["digit0", "digit1"]
    assert sorted(c["site"] for c in data.partition["clients"]) == ["site0", "site1", "site2"]
    assert sum(len(c.train) + len(c.test) for c in data.clients) == 125


def test_an_image_folder_names_the_classes_by_its_subfolders(tmp_path):
    from PIL import Image

    from fedsim.data.datasets import _mnist_5k_arrays

    images, labels = _mnist_5k_arrays()
    root = tmp_path / "folder"
    for i in range(0, 5000, 100):
        name = root / "train" / f"digit{labels[i]}" / f"{i}.png"
        name.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[i, 0], mode="L").save(name)
    data = build_data(load_config(None, [f"data.name=hf:{root}", "data.num_clients=2"]))
    assert data.partition["data"]["label_names"] == [f"digit{d}" for d in range(10)]
    assert np.bincount(data.dataset.labels).tolist() == [5] * 10
