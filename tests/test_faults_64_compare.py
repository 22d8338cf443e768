"""Issue 64, ``fedsim compare``: an --out that is a file, a run in progress, two datasets."""

from __future__ import annotations

from pathlib import Path

import yaml
from test_seed_comparison import write_run

from fedsim.cli import main

N = [100, 100]


def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    a = write_run(tmp_path / "runs" / "a", "a", "fedavg", 0, [0.5, 0.6], N)
    b = write_run(tmp_path / "runs" / "b", "b", "ditto", 0, [0.6, 0.7], N)
    return a, b


def refused(capsys, *argv: str) -> str:
    """The one line ``fedsim`` prints for ``argv``, checked to exit 2."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedsim: error: ") and "\n" not in err and "Traceback" not in err
    return err


def test_an_out_that_is_a_file_is_one_line_and_leaves_it_as_it_was(tmp_path, capsys):
    two_runs(tmp_path)
    taken = tmp_path / "taken.txt"
    taken.write_text("mine")
    for out in (taken, taken / "sub"):
        line = refused(capsys, "compare", str(tmp_path / "runs"), "--out", str(out))
        assert f"--out='{out}'" in line and "is a file, not a folder" in line
    assert taken.read_text() == "mine"
    assert main(["compare", str(tmp_path / "runs"), "--out", str(tmp_path / "new")]) == 0
    assert (tmp_path / "new" / "compare.md").is_file()


def test_a_run_still_in_progress_is_refused(tmp_path, capsys):
    a, _ = two_runs(tmp_path)
    (a / "summary.json").unlink()  # a run writes it when it ends
    line = refused(capsys, "compare", str(tmp_path / "runs"), "--out", str(tmp_path / "o"))
    assert f"run_dir='{a}': has no summary.json" in line and "in progress" in line
    assert not (tmp_path / "o").exists()


def test_runs_on_different_datasets_are_refused(tmp_path, capsys):
    a, b = two_runs(tmp_path)
    for run, name in ((a, "mnist-5k"), (b, "cifar10")):
        config = yaml.safe_load((run / "config.yaml").read_text())
        (run / "config.yaml").write_text(yaml.safe_dump({**config, "data": {"name": name}}))
    line = refused(capsys, "compare", str(a), str(b), "--out", str(tmp_path / "o"))
    assert f"run_dir='{b}': ran on data.name='cifar10'" in line and "'mnist-5k'" in line
    assert not (tmp_path / "o").exists()
