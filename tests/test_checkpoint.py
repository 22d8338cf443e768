"""Checkpoints: a resumed run is the run that was never interrupted; bad resumes fail early."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import NARROW_CNN, untimed

from fedsim.checkpoint import latest_checkpoint, load_checkpoint
from fedsim.cli import main
from fedsim.config import load_config
from fedsim.data import assemble
from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment
from fedsim.simulation import Simulation

# SCAFFOLD: a server state (x, c) and a private state per client (c_i); half the clients a round
BASE = [
    "algorithm.name=scaffold",
    "data.max_samples=1500",  # what is saved and restored, not how much is learnt
    "data.num_clients=10",
    "join_ratio=0.5",
    "runtime.executor=local",
    "checkpoint_every=2",
    *NARROW_CNN,  # the narrow FedAvgCNN: what is saved and restored, not the network's size
]


def run(out, *overrides: str, resume: bool = False):
    cfg = load_config("configs/quickstart.yaml", [*BASE, *overrides])
    return run_experiment(cfg, out, progress=False, report=False, resume=resume)


def metrics(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return untimed([json.loads(line) for line in lines])


def test_resumed_run_equals_the_uninterrupted_one(tmp_path):
    straight = run(tmp_path / "straight", "rounds=4")
    run(tmp_path / "resumed", "rounds=2")
    first = load_checkpoint(latest_checkpoint(tmp_path / "resumed"))
    assert first.rounds_trained == 2 and len(first.records) == 2
    assert first.client_states and set(first.client_states) <= set(range(10))  # their c_i
    resumed = run(tmp_path / "resumed", "rounds=4", resume=True)
    for key in straight.state:
        assert torch.equal(straight.state[key], resumed.state[key]), key
    for client in straight.client_store.clients():
        a, b = straight.client_store.get(client), resumed.client_store.get(client)
        assert all(torch.equal(a[k], b[k]) for k in a), client
    assert metrics(tmp_path / "resumed") == metrics(tmp_path / "straight")
    assert len(metrics(tmp_path / "resumed")) == 5  # rounds 0-3 and the final evaluation
    clients_csv = (tmp_path / "resumed" / "clients.csv").read_text()
    assert clients_csv == (tmp_path / "straight" / "clients.csv").read_text()
    assert resumed.summary == straight.summary
    saved = sorted(p.name for p in (tmp_path / "resumed" / "checkpoints").iterdir())
    assert saved == [
        "round_00002.pt",
        "round_00002.sha256",
        "round_00004.pt",
        "round_00004.sha256",
    ]  # the newest two, nothing half-written


def test_resume_that_cannot_continue_is_one_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"--resume=.*no checkpoint in .*checkpoint_every > 0"):
        run(tmp_path / "none", "rounds=1", resume=True)
    run(tmp_path / "run", "rounds=2")
    with pytest.raises(ConfigError, match=r"differs from the checkpoint's in client, seed"):
        run(tmp_path / "run", "rounds=4", "client.lr=0.01", "seed=3", resume=True)
    with pytest.raises(ConfigError, match=r"rounds=1: the checkpoint has 2 rounds trained"):
        run(tmp_path / "run", "rounds=1", resume=True)


def test_cli_resume_error_is_one_line_exit_2(tmp_path, capsys):
    code = main(["run", "configs/quickstart.yaml", "rounds=1", "--out", str(tmp_path), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--resume=" in err


def test_report_redraws_the_row_norm_figure_from_the_final_checkpoint(
    tmp_path, capsys, monkeypatch
):
    cfg = load_config(
        "configs/cwfedavg/mnist5k-pat-cw-output-wdr.yaml",
        [
            "rounds=2",
            "data.num_clients=10",
            "data.max_samples=1500",
            "runtime.executor=local",
            "checkpoint_every=1",
            *NARROW_CNN,
        ],
    )
    run_dir = tmp_path / "cw"
    run_experiment(cfg, run_dir, progress=False, report=False)
    figure = run_dir / "plots" / "row_norms.png"
    drawn = figure.read_bytes()
    figure.unlink()

    def no_simulation(*args, **kwargs):
        raise AssertionError("fedsim report must not rebuild the simulation")

    # the checkpoint alone (algorithm + states): no simulation, no dataset
    monkeypatch.setattr(Simulation, "__init__", no_simulation)
    monkeypatch.setattr(assemble, "cached_dataset", no_simulation)
    assert main(["report", str(run_dir)]) == 0
    assert str(figure) in capsys.readouterr().out.splitlines()
    assert figure.read_bytes() == drawn  # the same state, the same figure
