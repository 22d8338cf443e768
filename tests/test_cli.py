"""Bad input fails before any work: one line naming key and value, exit 2, no run folder."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import last_wins, stderr_lines

import fedsim.data.datasets as datasets
from fedsim.cli import main

QUICK = ["rounds=1", "data.num_clients=4"]


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["data.nmae=mnist"], "data.nmae='mnist': unknown key"),
        (["rounds=abc"], "rounds='abc': must be an integer"),
        (["client.lr=fast"], "client.lr='fast': must be a number"),
        (["data.partition.alpha=0"], "data.partition.alpha=0.0: must be > 0"),
        (["data.partition.alpha=-1.5"], "data.partition.alpha=-1.5: must be > 0"),
        (["join_ratio=1.5"], "join_ratio=1.5: must be in (0, 1]"),
        (["data.partition.name=shards"], "data.partition.name='shards': allowed: iid"),
        (["algorithm.name=fedsgd"], "algorithm.name='fedsgd': allowed:"),
        (
            ["data.partition.name=pathological", "data.partition.classes_per_client=11"],
            "data.partition.classes_per_client=11",
        ),
        (["data.num_clients=5001"], "data.num_clients=5001"),
        (["data.name=imagenet"], "data.name='imagenet'"),
        (["runtime.device=gpu"], "runtime.device='gpu': allowed: auto, cpu, cuda, cuda:N"),
        (
            ["runtime.executor=local", "runtime.workers=2"],
            "runtime.workers=2: only with runtime.executor=ray",
        ),
        (["data.max_samples=0"], "data.max_samples=0: must be >= 1 (or null: all samples)"),
        (["data.max_samples=1.5"], "data.max_samples=1.5: must be an integer"),
    ],
)
def test_bad_input_one_line_exit_2_no_folder(overrides, expected, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        last_wins(["run", "configs/quickstart.yaml", *QUICK, *overrides, "--out", str(out)])
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("fedsim: error: ") and expected in err
    assert err.count("\n") == 1  # one line
    assert not out.exists()


@pytest.mark.parametrize(
    "yaml_text, override, nearest",
    [
        ("", "client.lrr=0.1", "client.lr"),
        ("client:\n  lrr: 0.1\n", None, "client.lr"),  # the same from a YAML file
        ("", "roundz=3", "rounds"),
        ("", "lr=0.1", "client.lr"),  # a key put in no section: the section that has it
        ("algorithm:\n  lr: 0.1\n", None, "client.lr"),
        ("", "data.partition.alpah=0.3", "data.partition.alpha"),
        ("algorithm:\n  name: fedprox\n  muu: 0.1\n", None, "algorithm.mu"),
        ("", "tracking.wandb.projct=x", "tracking.wandb.project"),
    ],
)
def test_unknown_key_suggests_the_nearest_and_lists_the_allowed(
    yaml_text, override, nearest, tmp_path, capsys
):
    config = tmp_path / "config.yaml"
    config.write_text(yaml_text or "rounds: 1\n")
    code = main(["run", str(config), "--check", *([override] if override else [])])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f": unknown key, did you mean {nearest}? (allowed: " in err
    assert err.split("(allowed: ")[1].count(", ") >= 2  # the section's keys are still listed


def test_unknown_key_with_nothing_near_suggests_nothing(capsys):
    assert main(["run", "configs/quickstart.yaml", "--check", "zzz=1"]) == 2
    err = capsys.readouterr().err
    assert "zzz=1: unknown key (allowed: adapters, aggregation, algorithm," in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_on_a_machine_without_one(tmp_path, capsys):
    out = tmp_path / "run"
    overrides = [*QUICK, "runtime.device=cuda"]
    code = main(["run", "configs/quickstart.yaml", *overrides, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "runtime.device='cuda': this process sees 0 CUDA devices; allowed here: auto, cpu" in err
    assert not out.exists()


def test_dataset_neither_on_disk_nor_downloadable(tmp_path, capsys, monkeypatch):
    def no_network(name, root):
        raise OSError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(datasets, "_torchvision_download", no_network)
    out = tmp_path / "run"
    args = ["data.name=cifar10", f"data.root={tmp_path / 'nothing'}", "--out", str(out)]
    code = main(["run", "configs/quickstart.yaml", *QUICK, *args])
    err = capsys.readouterr().err
    assert code == 2 and "data.name='cifar10'" in err and err.count("\n") == 1
    assert "name resolution" in err
    assert not out.exists()


def test_cli_process_exit_code(tmp_path):
    """A real process exits 2 with one line; a dataset missing with the download off is
    found from the file names alone, before torch is imported (a second, not ~8 s)."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",  # every module the process imports, on stderr
            "-m",
            "fedsim.cli",
            "run",
            "configs/quickstart.yaml",
            "data.name=mnist",
            f"data.root={tmp_path}",
            "data.download=false",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    imported = [line.split("|")[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")]  # fmt: skip
    assert "fedsim.cli.commands" in imported and "torch" not in imported
    lines = [line for line in stderr_lines(proc.stderr) if not line.startswith("import time:")]
    assert len(lines) == 1 and "data.name='mnist'" in lines[0]
    assert "download is disabled" in lines[0]
    assert not out.exists()


def test_config_error_survives_pickling():
    """Raised in a worker process or Ray actor, it must arrive whole (key, value, allowed)."""
    import pickle

    from fedsim.errors import ConfigError

    error = pickle.loads(pickle.dumps(ConfigError("data.partition.alpha", 0.1, "raise alpha")))
    assert (error.key, error.value, error.allowed) == ("data.partition.alpha", 0.1, "raise alpha")
    assert str(error) == "data.partition.alpha=0.1: raise alpha"


@pytest.mark.parametrize(
    "argv", [["--help"], ["run", "--help"], ["tune", "--help"], ["keys", "--help"]]
)
def test_help_is_plain_text_and_points_to_the_keys(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "`" not in out  # no reStructuredText markup in a terminal
    if argv[0] in ("--help", "run"):
        assert "fedsim keys" in out


def test_version_bare_help_and_a_closed_pipe(capsys):
    """``fedsim --version``; bare ``fedsim`` prints the help (exit 0); ``fedsim keys | head``
    ends quietly when the reader closes the pipe."""
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("fedsim ")
    assert main([]) == 0 and "usage: fedsim" in capsys.readouterr().out
    proc = subprocess.run(
        f"{sys.executable} -m fedsim.cli keys experiment | head -1",
        shell=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.stdout.strip() and "Traceback" not in proc.stderr and "Error" not in proc.stderr


def test_progress_bar_counts_training_rounds():
    from fedsim.tracking.base import RoundRecord
    from fedsim.tracking.progress import ProgressSink

    sink = ProgressSink(2)
    sink.start(Path("."), {}, {})
    for r in range(3):  # rounds 0, 1 train; round 2 only evaluates
        sink.log_round(RoundRecord(r, {"acc_weighted": 0.5, "acc_mean": 0.5}))
    task = sink.progress.tasks[0]
    assert (task.completed, task.total) == (2, 2)
    sink.close()
