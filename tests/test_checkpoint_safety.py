"""Checkpoints that are damaged, hostile or old: a resume falls back, refuses or goes on.

- the newest two checkpoints are kept, each verified before an older one is deleted; a
  damaged newest one (truncated, empty, not a checkpoint, random bytes) is skipped with a
  one-line warning, and none readable is one ConfigError line; ``fedsim report`` warns;
- a checkpoint is loaded without running code from it: a global outside fedsim's classes,
  numpy's reconstruction and the config's own plugin modules is refused before unpickling;
- a checkpoint written before a config key existed resumes when the key has its default.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import quickstart, stderr_lines, untimed

import fedsim.checkpoint
import fedsim.experiment
import fedsim.run_folder
from fedsim.algorithms.base import Algorithm
from fedsim.checkpoint import (
    Checkpoint,
    checkpoints,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from fedsim.checkpoint_digest import CheckpointUnreadable
from fedsim.checkpoint_resume import check_resumable, resumable_checkpoint
from fedsim.cli import main
from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment

# SCAFFOLD (a server state and a private state per client) on a tiny federation
BASE = [
    "algorithm.name=scaffold",
    "data.num_clients=4",
    "data.max_samples=400",
    "join_ratio=0.5",
    "checkpoint_every=2",
]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished 4-round run with checkpoints after rounds 2 and 4 (copy it before changing)."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    run_experiment(quickstart(*BASE, "rounds=4"), run_dir, progress=False, report=False)
    return run_dir


@pytest.fixture
def run_dir(finished, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def metrics(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return untimed([json.loads(line) for line in lines])


def one_line(err: str) -> str:
    lines = stderr_lines(err)
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


# how a checkpoint gets damaged -> what the warning says
DAMAGE = {
    "truncated": (truncate, r"truncated at \d+ bytes"),
    "empty": (lambda p: p.write_bytes(b""), r"empty file"),
    "text": (lambda p: p.write_text("not a checkpoint\n"), r"not a checkpoint file"),
    "random bytes": (
        lambda p: p.write_bytes(np.random.default_rng(0).bytes(5000)),
        r"not a checkpoint file: 5000 bytes",
    ),
    "another torch file": (
        lambda p: torch.save([torch.zeros(2)], p),
        r"its bytes do not match round_00004\.sha256",
    ),
}


def test_the_newest_two_checkpoints_are_kept(finished):
    assert [p.name for p in checkpoints(finished)] == ["round_00004.pt", "round_00002.pt"]
    assert not list((finished / "checkpoints").glob("*.tmp"))


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_newest_checkpoint_falls_back_with_one_warning(damage, run_dir, capsys):
    spoil, reason = DAMAGE[damage]
    spoil(run_dir / "checkpoints" / "round_00004.pt")
    checkpoint = resumable_checkpoint(quickstart(*BASE, "rounds=4"), run_dir)
    assert checkpoint.rounds_trained == 2
    line = one_line(capsys.readouterr().err)
    assert re.fullmatch(
        rf"fedsim: warning: checkpoints/round_00004\.pt is damaged \({reason}[^;]*\), kept as "
        r"round_00004\.pt\.damaged; resuming from round_00002\.pt: rounds 2-3 are computed "
        r"again",
        line,
    ), line
    aside = run_dir / "checkpoints" / "round_00004.pt.damaged"
    assert aside.is_file() and not (run_dir / "checkpoints" / "round_00004.pt").exists()


def test_resume_past_a_truncated_checkpoint_equals_the_uninterrupted_run(run_dir, capsys):
    straight = metrics(run_dir)
    truncate(run_dir / "checkpoints" / "round_00004.pt")
    argv = ["run", "configs/quickstart.yaml", "runtime.executor=local", *BASE, "rounds=4"]
    code = main([*argv, "--out", str(run_dir), "--resume", "--no-progress"])
    assert code == 0
    assert "is damaged" in one_line(capsys.readouterr().err)
    assert metrics(run_dir) == straight
    # rounds 2-3 ran again and their checkpoint replaced the damaged one
    assert load_checkpoint(latest_checkpoint(run_dir)).rounds_trained == 4
    assert [p.name for p in checkpoints(run_dir)] == ["round_00004.pt", "round_00002.pt"]


def test_no_readable_checkpoint_is_one_config_error_line(run_dir, capsys):
    truncate(run_dir / "checkpoints" / "round_00004.pt")
    (run_dir / "checkpoints" / "round_00002.pt").write_bytes(b"")
    with pytest.raises(ConfigError) as caught:
        resumable_checkpoint(quickstart(*BASE, "rounds=4"), run_dir)
    assert re.fullmatch(
        r"--resume='.*': no readable checkpoint \(round_00004\.pt: truncated at \d+ bytes; "
        r"round_00002\.pt: empty file\)",
        str(caught.value),
    ), caught.value
    argv = ["run", "configs/quickstart.yaml", "runtime.executor=local", *BASE, "rounds=4"]
    assert main([*argv, "--out", str(run_dir), "--resume", "--no-progress"]) == 2
    assert "no readable checkpoint" in one_line(capsys.readouterr().err)


def test_report_warns_on_a_damaged_checkpoint(run_dir, capsys):
    truncate(run_dir / "checkpoints" / "round_00004.pt")
    assert main(["report", str(run_dir)]) == 0
    captured = capsys.readouterr()
    line = one_line(captured.err)
    assert "round_00004.pt is damaged (truncated" in line and "figures not redrawn" in line
    assert captured.out  # the report's own plots are drawn


def tiny(rounds: int, config: dict | None = None, **state) -> Checkpoint:
    return Checkpoint(rounds, config or {"rounds": 9}, state or {"x": torch.zeros(3)}, {}, [])


def test_save_verifies_before_it_deletes_and_keeps_two(tmp_path):
    for rounds in (1, 2, 3):
        save_checkpoint(tmp_path, tiny(rounds))
    assert [p.name for p in checkpoints(tmp_path)] == ["round_00003.pt", "round_00002.pt"]
    # a checkpoint that could not be resumed from fails now and replaces nothing
    with pytest.raises(ConfigError, match=r"references test_checkpoint_safety\.Unlisted"):
        save_checkpoint(tmp_path, tiny(4, x=Unlisted()))
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "round_00002.pt",
        "round_00002.sha256",
        "round_00003.pt",
        "round_00003.sha256",
    ]
    # a run resumed from round 2 (past a damaged round 3) drops round 3 when it saves again
    save_checkpoint(tmp_path, tiny(2))
    assert [p.name for p in checkpoints(tmp_path)] == ["round_00002.pt"]


def test_empty_numpy_arrays_and_bytes_round_trip(tmp_path):
    """Protocol 2 writes an empty bytes object (an empty array's raw data: FC's cluster tree
    before its first merge) as ``builtins.bytes()``; it once made such a checkpoint refused."""
    state = {"tree": np.zeros((0, 4), dtype=np.int64), "blob": b"", "data": b"\x00\xff"}
    path = save_checkpoint(tmp_path, tiny(1, **state))
    loaded = load_checkpoint(path).state
    assert loaded["tree"].shape == (0, 4) and loaded["tree"].dtype == np.int64
    assert loaded["blob"] == b"" and loaded["data"] == b"\x00\xff"


def test_bytes_in_a_checkpoint_builds_nothing_but_an_empty_bytes(tmp_path):
    class Big:  # what a crafted file could ask for: bytes(10**12) (a terabyte)
        def __reduce__(self):
            return (bytes, (10**12,))

    with pytest.raises((CheckpointUnreadable, ConfigError)):
        save_checkpoint(tmp_path, tiny(1, x=Big()))
    assert not list((tmp_path / "checkpoints").glob("*.pt"))


class Unlisted:
    """A class no allowlist names (this module is not the config's plugin module)."""


# --------------------------------------------------------------------- hostile checkpoints


class Payload:
    """Unpickles by calling ``call(*args)``: what a hostile checkpoint does."""

    def __init__(self, call, *args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


HOSTILE = {  # what the checkpoint calls -> the global it is refused for
    "os.system": (lambda m: Payload(os.system, f"touch {m}"), r"(posix|nt|os)\.system"),
    "a fedsim function of a run-driving module": (
        lambda m: Payload(fedsim.run_folder.make_run_dir, Path(m)),
        r"fedsim\.run_folder\.make_run_dir",
    ),
    "a function of a trusted fedsim module": (
        lambda m: Payload(fedsim.checkpoint.save_checkpoint, m, None),
        r"fedsim\.checkpoint\.save_checkpoint",
    ),
    "shutil.rmtree under a fedsim module's name": (
        lambda m: Payload(fedsim.checkpoint.close_stores, str(m)),  # renamed in the file below
        r"fedsim\.storage\.client_states\.shutil\.rmtree",
    ),
}
SPOOF = b"cfedsim.checkpoint\nclose_stores\n", b"cfedsim.storage.client_states\nshutil.rmtree\n"


def write_hostile(kind: str, run_dir: Path, marker: Path) -> Path:
    """A checkpoint ``round_00006.pt`` whose server state calls something on load."""
    make, _ = HOSTILE[kind]
    payload = {
        "format": 1,
        "rounds_trained": 6,
        "config": {"rounds": 6},
        "state": {"x": make(marker)},
        "client_states": {},
        "algorithm": None,
        "records": [],
    }
    path = run_dir / "checkpoints" / "round_00006.pt"
    torch.save(payload, path)
    if kind.startswith("shutil.rmtree"):  # a GLOBAL opcode pickle would not write itself
        with zipfile.ZipFile(path) as archive:
            entries = [(i.filename, archive.read(i)) for i in archive.infolist()]
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
            for name, data in entries:
                archive.writestr(name, data.replace(*SPOOF) if name.endswith("data.pkl") else data)
    return path


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_checkpoint_that_would_run_code_is_refused(kind, run_dir, tmp_path, capsys):
    marker = tmp_path / "PWNED"
    rmtree = kind.startswith("shutil.rmtree")
    if rmtree:
        marker.mkdir()  # the folder it would delete
    path = write_hostile(kind, run_dir, marker)
    refused = rf"checkpoint references {HOSTILE[kind][1]}, which fedsim does not load"
    with pytest.raises(ConfigError, match=refused):
        load_checkpoint(path)
    argv = ["run", "configs/quickstart.yaml", "runtime.executor=local", *BASE, "rounds=6"]
    assert main([*argv, "--out", str(run_dir), "--resume", "--no-progress"]) == 2
    assert re.search(refused, one_line(capsys.readouterr().err))
    assert main(["report", str(run_dir)]) == 0
    line = one_line(capsys.readouterr().err)
    assert re.search(refused, line) and "figures not redrawn" in line
    assert marker.is_dir() if rmtree else not marker.exists()  # nothing ran
    if kind == "os.system":  # the file is hostile: a plain unpickler runs it
        torch.load(path, weights_only=False)
        assert marker.exists()


class PluginAlgorithm(Algorithm):
    """An algorithm named by import path (``test_checkpoint_safety:PluginAlgorithm``)."""


@dataclass
class PluginState:
    value: int


def test_the_configs_plugin_module_is_loaded_and_nothing_else(tmp_path):
    config = {"rounds": 9, "algorithm": {"name": f"{__name__}:PluginAlgorithm"}}
    path = save_checkpoint(tmp_path, tiny(1, config, s=PluginState(3)))  # verified with config
    assert load_checkpoint(path, config).state["s"] == PluginState(3)
    with pytest.raises(ConfigError, match=rf"references {__name__}\.PluginState"):
        load_checkpoint(path)  # no config: no plugin module
    # a config that names something else than an Algorithm does not open its module
    for name in ("subprocess:Popen", f"{__name__}:PluginState", "no_such_module:X"):
        with pytest.raises(ConfigError, match=rf"references {__name__}\.PluginState"):
            load_checkpoint(path, {"algorithm": {"name": name}})


def test_every_state_kind_loads_under_the_allowlist(tmp_path):
    """Tensors, numpy arrays and scalars of every dtype, a client state store, containers."""
    from fedsim.storage import ClientStateStore

    store = ClientStateStore(0)
    store.put(1, {"w": torch.ones(2)})
    arrays = {str(t): np.arange(3).astype(t) for t in ("f4", "f8", "i8", "u1", "bool", "f2")}
    state = {
        "t": torch.arange(4.0),
        "arrays": arrays,
        "scalar": np.float64(1.5),
        "store": store,
        "tuple": (1, "a", None),
    }
    path = save_checkpoint(tmp_path, tiny(1, **state))
    loaded = load_checkpoint(path).state
    for key, array in arrays.items():
        np.testing.assert_array_equal(loaded["arrays"][key], array)
        assert loaded["arrays"][key].dtype == array.dtype
    assert loaded["scalar"] == 1.5 and loaded["tuple"] == (1, "a", None)
    assert torch.equal(loaded["store"].get(1)["w"], torch.ones(2))
    store.close()
    loaded["store"].close()


# ------------------------------------------------------------------ old checkpoints


def test_a_key_added_since_the_checkpoint_counts_as_unchanged_at_its_default(tmp_path, capsys):
    cfg = quickstart("algorithm.name=scaffold", "checkpoint_every=2", "rounds=4")
    old = cfg.to_dict()
    del old["data"]["max_samples"]  # written before data.max_samples existed
    save_checkpoint(tmp_path, Checkpoint(2, old, {"x": torch.zeros(3)}, {}, []))
    assert resumable_checkpoint(cfg, tmp_path).rounds_trained == 2
    assert capsys.readouterr().err == ""
    # a value other than the default is a change
    subset = quickstart("algorithm.name=scaffold", "checkpoint_every=2", "data.max_samples=400")
    with pytest.raises(ConfigError, match=r"differs from the checkpoint's in data;"):
        resumable_checkpoint(subset, tmp_path)


def test_an_algorithm_parameter_added_since_the_checkpoint_counts_at_its_default():
    cfg = quickstart("algorithm.name=scaffold", "rounds=4").to_dict()
    params = [k for k in cfg["algorithm"] if k != "name"]
    assert params, cfg["algorithm"]
    old = {**cfg, "algorithm": {"name": "scaffold"}}  # none of its parameters saved
    check_resumable(Checkpoint(2, old, {}, {}, []), cfg, Path("round_00002.pt"))
    # a key that must be given has no default to count as: its absence is a change
    cfg = quickstart("algorithm.name=fedprox", "algorithm.mu=0.01", "rounds=4").to_dict()
    old = {**cfg, "algorithm": {k: v for k, v in cfg["algorithm"].items() if k != "mu"}}
    with pytest.raises(ConfigError, match=r"differs from the checkpoint's in algorithm;"):
        check_resumable(Checkpoint(2, old, {}, {}, []), cfg, Path("round_00002.pt"))
    old["algorithm"]["weighting"] = "uniform"  # a key it has, changed
    cfg["algorithm"].pop("mu")
    with pytest.raises(ConfigError, match=r"differs from the checkpoint's in algorithm;"):
        check_resumable(Checkpoint(2, old, {}, {}, []), cfg, Path("round_00002.pt"))
