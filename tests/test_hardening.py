"""Issue 25's regressions: no silent corruption, no traceback, no hang, nothing accepted wrong.

- a checkpoint with one byte flipped (in a tensor, in the pickled metadata) is caught by its
  SHA-256 and resume falls back, keeping the damaged file aside; a flipped byte in a spilled
  client state is a one-line error, never a different client;
- inputs that used to escape as tracebacks (a 2**64 seed, a 5,000-digit integer, 1e400
  written out, an unwritable --out, a garbage run folder for ``fedsim report``, a ``tune:``
  list, an overflowing lognormal speed) are one line;
- a YAML alias bomb and a million workers are refused at once; ``tune.*`` keys given to
  ``run``, a key given twice, ``--out ''`` are refused; a diverged run says what it kept; a
  failed download keeps nothing. (SIGTERM and Ctrl-C: tests/test_interrupts.py.)
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import NARROW_CNN, invoke_cli, one_line_error, refused_check, stderr_lines, untimed

from fedsim.cli import main
from fedsim.config import load_config
from fedsim.experiment import run_experiment
from fedsim.storage import ClientStateStore, CorruptedState
from fedsim.tracking.base import ClientRow
from fedsim.tracking.report import CLIENT_COLUMNS, load_run

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")
SMALL = [  # rounds given by each test; the narrow FedAvgCNN: none is about the net
    *NARROW_CNN,
    "data.num_clients=4",
    "data.max_samples=400",
    "runtime.executor=local",
    "client.lr=0.05",
]
TINY = ["rounds=2", *SMALL]


def quick(out: Path, *overrides: str, resume: bool = False):
    torch.set_num_threads(1)
    cfg = load_config(QUICKSTART, [*TINY, *overrides])
    return run_experiment(cfg, out, progress=False, report=False, resume=resume)


def metrics(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return untimed([json.loads(line) for line in lines])


# ------------------------------------------------------------------ silent corruption


def entry_offset(path: Path, suffix: str) -> int:
    """Where the stored bytes of the zip entry ending in ``suffix`` start in ``path``."""
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(suffix))
    with open(path, "rb") as file:
        file.seek(info.header_offset + 26)
        name_len, extra_len = np.frombuffer(file.read(4), dtype="<u2")
    return info.header_offset + 30 + int(name_len) + int(extra_len)


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> Path:
    """A finished 4-round SCAFFOLD run with checkpoints after rounds 2 and 4."""
    out = tmp_path_factory.mktemp("ck") / "run"
    quick(out, "rounds=4", "algorithm.name=scaffold", "checkpoint_every=2")
    return out


@pytest.mark.parametrize("region", ["tensor", "metadata"])
def test_a_flipped_byte_is_caught_and_resume_falls_back(region, checkpointed, tmp_path, capsys):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(checkpointed, run_dir)
    newest = run_dir / "checkpoints" / "round_00004.pt"
    where = entry_offset(newest, "data/0" if region == "tensor" else "data.pkl") + 20
    flip(newest, where)
    argv = ["run", QUICKSTART, *SMALL, "rounds=4", "algorithm.name=scaffold",
            "checkpoint_every=2", "--out", str(run_dir), "--resume", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    err = stderr_lines(capsys.readouterr().err)
    assert len(err) == 1 and "round_00004.pt is damaged" in err[0], err
    assert "kept as round_00004.pt.damaged" in err[0] and "rounds 2-3 are computed again" in err[0]
    assert (run_dir / "checkpoints" / "round_00004.pt.damaged").is_file()
    assert metrics(run_dir) == metrics(checkpointed)  # the recomputed rounds are the same


def test_digest_is_the_sha256_of_the_file_and_costs_little(checkpointed):
    for pt in sorted((checkpointed / "checkpoints").glob("*.pt")):
        digest = pt.with_suffix(".sha256").read_text().split()
        assert digest == [hashlib.sha256(pt.read_bytes()).hexdigest(), pt.name]


def test_every_checkpoint_flipped_is_one_line_error(checkpointed, tmp_path, capsys):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(checkpointed, run_dir)
    for pt in (run_dir / "checkpoints").glob("*.pt"):
        flip(pt, entry_offset(pt, "data/0") + 4)
    argv = ["run", QUICKSTART, *SMALL, "rounds=4", "algorithm.name=scaffold",
            "checkpoint_every=2", "--out", str(run_dir), "--resume"]  # fmt: skip
    assert main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "no readable checkpoint" in line and "do not match" in line


def test_a_flipped_spilled_state_is_an_error_not_another_client(tmp_path):
    store = ClientStateStore(0, spill_root=tmp_path)  # every state spills at once
    store.put(3, {"c": torch.arange(1000, dtype=torch.float32)})
    (spilled,) = store.spill_dir.iterdir()
    assert torch.equal(store.get(3)["c"], torch.arange(1000, dtype=torch.float32))
    flip(spilled, spilled.stat().st_size - 100)
    with pytest.raises(CorruptedState, match="client 3's spilled state .* changed on disk"):
        store.get(3)
    store.close()


# ------------------------------------------------------------------ tracebacks that remain


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("seed=18446744073709551616", "seed=18446744073709551616: must be in [0, 2^63)"),
        ("rounds=" + "9" * 5000, "an integer of more than 4,300 digits"),
        ("client.lr=1" + "0" * 400, "must be a finite number (this one overflows)"),
        ("system.speeds=lognormal:800,0", "overflows"),
        ("asynchronous.enabled=true system.speeds=lognormal:800,0", "overflows"),
        ("algorithm.name=oracle data.partition.name=dirichlet", "data.partition.name='dirichlet'"),
    ],
)
def test_former_tracebacks_are_one_line(override, needle, capsys, tmp_path):
    line = refused_check(override, capsys, tmp_path)
    assert needle in line and len(line) < 400, line


def test_out_that_cannot_be_written_or_is_empty(capsys, tmp_path):
    for out in ("/proc/x", ""):
        for extra in ([], ["--check"]):
            argv = ["run", QUICKSTART, *TINY, "--out", out, *extra]
            assert "--out=" in one_line_error(argv, capsys, tmp_path)


def test_report_reads_what_it_can_and_names_what_it_cannot(tmp_path, capsys):
    run_dir = tmp_path / "run"
    quick(run_dir)
    good = (run_dir / "metrics.jsonl").read_text()
    (run_dir / "metrics.jsonl").write_text(good + "garbage\n" + good[: len(good) // 3])
    rows = (run_dir / "clients.csv").read_text().splitlines()
    cells = rows[2].split(",")
    cells[2] = "not-a-number"
    rows[2] = ",".join(cells)
    (run_dir / "clients.csv").write_text("\n".join(rows) + "\n")
    (run_dir / "config.yaml").write_text("name: [unclosed\n")
    assert main(["report", str(run_dir)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any("metrics.jsonl: 2 lines (4-5): not JSON" in e for e in err), err  # said once
    assert any("clients.csv: line 3" in e for e in err), err
    assert any("config.yaml: not YAML (line" in e for e in err), err
    assert all(line.startswith("fedsim: warning:") for line in err)
    assert (run_dir / "plots" / "accuracy_curves.png").stat().st_size > 0


def test_every_clients_csv_column_reads_back_typed(tmp_path):
    """A run with an attack, a robust rule, a held-out client and both models evaluated
    writes the ``attacked`` and ``held_out`` columns (True/False), ``global_accuracy`` and
    empty weights; every column ClientRow can hold is read back as a number (held-out rows
    apart), and the plots are drawn (they failed on 'False' before)."""
    import dataclasses

    fields = {f.name for f in dataclasses.fields(ClientRow)} - {"train"}  # train/<name> columns
    assert set(CLIENT_COLUMNS) == fields
    run_dir = tmp_path / "run"
    torch.set_num_threads(1)
    cfg = load_config(QUICKSTART, [*TINY, "data.num_clients=7", "eval.holdout_clients=1",
                      "eval.model=both", "attack.kind=sign_flip",
                      "aggregation.rule=krum"])  # fmt: skip
    run_experiment(cfg, run_dir, progress=False)
    run = load_run(run_dir)
    assert not run.problems
    # columns of options this run leaves off (eval.validation_ratio, eval.count_flops), and
    # perplexity and the per-token losses' spread (next-token prediction only)
    optional = {"val_accuracy", "flops", "peak_memory_mib", "perplexity", "loss_sd"}
    assert set(run.clients) == set(run.held_out) == set(CLIENT_COLUMNS) - optional
    assert set(np.unique(run.clients["attacked"])) <= {0.0, 1.0}
    assert set(run.clients["held_out"]) == {0.0} and set(run.held_out["held_out"]) == {1.0}
    assert np.isfinite(run.clients["global_accuracy"]).all()
    assert run.clients["client"].dtype == np.int64
    assert (run_dir / "plots" / "client_accuracy_vs_classes.png").is_file()


def test_tune_section_that_is_a_list_is_one_line(capsys, tmp_path):
    config = tmp_path / "tune.yaml"
    config.write_text("rounds: 1\ntune:\n  - client.lr\n")
    work = tmp_path / "work"
    work.mkdir()
    line = one_line_error(["tune", str(config), "--search", "client.lr=choice(0.1)"], capsys, work)
    assert "tune=" in line and "must be a mapping" in line


# ------------------------------------------------------------------ hangs


def test_yaml_alias_bomb_is_refused_at_once(capsys, tmp_path):
    """Refused before it is expanded: one line, exit 2, no run folder (one_line_error checks
    the exit code and that nothing appeared in the working folder; no --check: a run that
    went on would write runs/quickstart there)."""
    levels = ["&a0 [x,x,x,x,x,x,x,x,x]"] + [
        f"&a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)
    ]
    argv = ["run", QUICKSTART, *TINY, f"tracking.wandb.tags=[{','.join(levels)}]"]
    line = one_line_error(argv, capsys, tmp_path)
    assert line.startswith("fedsim: error: tracking.wandb.tags=") and "too large: more than" in line
    # bounded: the value is cut at 300 characters
    assert "values once its aliases are expanded" in line and len(line) < 600, line


@pytest.mark.parametrize("where", ["config file", "override"])
def test_a_document_over_a_million_characters_is_refused(where, capsys, tmp_path):
    """A config file (a valid one, padded with a comment) or an override value over
    1,000,000 characters: one line "too large", exit 2, no run folder."""
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "big.yaml"
    if where == "config file":
        config.write_text("rounds: 1\n# " + "x" * 1_000_000 + "\n")
        argv = ["run", str(config), *SMALL]
    else:
        config.write_text("rounds: 1\n")
        argv = ["run", str(config), *SMALL, "name=" + "x" * 1_000_001]
    line = one_line_error(argv, capsys, work)
    assert "too large: at most 1,000,000 characters" in line and len(line) < 400, line
    assert not (work / "runs").exists()


def test_a_million_workers_are_refused_before_ray_starts(capsys, tmp_path, monkeypatch):
    import fedsim.runtime.pool_start as pool_start

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray must not start")

    monkeypatch.setattr(pool_start, "join_or_start_ray", no_ray)
    argv = ["run", QUICKSTART, "rounds=1", "runtime.executor=ray",
            "runtime.workers=1000000", "--no-progress"]  # fmt: skip
    line = one_line_error(argv, capsys, tmp_path)
    assert "runtime.workers=1000000: a local Ray on this machine holds at most" in line


# ------------------------------------------------------------------ accepted but wrong


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["tune.bogus=1"], "a search option: fedsim run ignores the tune section"),
        (["client.lr=0.05", "client.lr=0.01"], "client.lr=0.01: given twice"),
    ],
)
def test_run_refuses_search_keys_and_a_key_given_twice(extra, needle, capsys, tmp_path):
    argv = ["run", QUICKSTART, "rounds=1", *extra, "--check"]
    assert needle in one_line_error(argv, capsys, tmp_path)


def test_tune_refuses_a_search_key_given_twice(capsys, tmp_path):
    argv = ["tune", QUICKSTART, "rounds=1", "--search", "client.lr=choice(0.1)",
            "--search", "client.lr=choice(0.2)"]  # fmt: skip
    assert "searched twice" in one_line_error(argv, capsys, tmp_path)


def test_diverged_run_says_what_it_kept(capsys, tmp_path):
    out = tmp_path / "run"
    argv = ["run", QUICKSTART, *SMALL[:-1], "rounds=2", "client.lr=1e30", "--out", str(out),
            "--no-progress", "privacy.mode=local", "privacy.clip_norm=1"]  # fmt: skip
    code, err = main(argv), capsys.readouterr().err
    line = err.strip()
    assert code == 1 and "\n" not in line, err
    assert f"{out} is kept" in line and "privacy.noise_multiplier=1.0" in line
    assert "lower client.lr=1e+30," in line, line  # the value that diverged
    assert json.loads((out / "summary.json").read_text())["status"] == "diverged"


def test_missing_dataset_leaves_no_folder(capsys, tmp_path, monkeypatch):
    import fedsim.data.dataset_files as dataset_files
    import fedsim.data.datasets as datasets

    def offline(name, root):
        Path(root).mkdir(parents=True, exist_ok=True)
        (Path(root) / "partial.gz").write_bytes(b"x")
        raise OSError("no network")

    monkeypatch.setattr(datasets, "_torchvision_download", offline)
    # Debian's fashion-mnist package (installed here and in CI) would be found instead
    monkeypatch.setattr(dataset_files, "DEBIAN_FASHION_MNIST", tmp_path / "no-system-copy")
    data_root = tmp_path / "work" / "data"
    (tmp_path / "work").mkdir()
    argv = ["run", QUICKSTART, "rounds=1", "data.name=fashion-mnist",
            f"data.root={data_root}", "runtime.executor=local"]  # fmt: skip
    assert not datasets.dataset_present("fashion-mnist", data_root)
    line = one_line_error(argv, capsys, tmp_path / "work")  # exit 2, nothing in work/
    assert "download failed: OSError: no network" in line and not data_root.exists(), line
    code, err = invoke_cli([*argv, "--check"], capsys, tmp_path / "work")
    assert code == 0 and not data_root.exists()
