"""Rows of docs/explanation/reliability.md (and the promises next to it in the docs) that had
no test able to fail: each test here checks the promise itself, on a run of 1-3 rounds of 400
samples over 4 clients, on the narrow FedAvgCNN (the promises are not about the net).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import NARROW_CNN, stderr_lines

from fedsim.cli import main
from fedsim.config import load_config
from fedsim.experiment import run_experiment
from fedsim.storage import ClientStateStore

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")
SMALL = ["data.num_clients=4", "data.max_samples=400", "runtime.executor=local",
         "client.lr=0.05", *NARROW_CNN]  # fmt: skip


def quick(out: Path | None, *overrides: str, resume: bool = False):
    torch.set_num_threads(1)
    cfg = load_config(QUICKSTART, [*SMALL, *overrides])
    return run_experiment(cfg, out, progress=False, report=False, resume=resume)


# ------------------------------------------------------------------ a spilled state changed


def test_a_spilled_state_changed_on_disk_is_one_line_exit_1(tmp_path, capsys, monkeypatch):
    """SCAFFOLD's control variates, every one spilled (runtime.state_memory_gb=0): the first
    spilled file read back in round 1 has one byte changed on disk just before it is read
    (after round 0 wrote it). The CLI says so in one line, naming the client, and exits 1."""
    read = ClientStateStore._read
    changed: list[int] = []

    def change_then_read(store: ClientStateStore, client: int):
        spilled = store._spilled.get(client)
        if spilled is not None and not changed:
            data = bytearray(spilled[0].read_bytes())
            data[len(data) // 2] ^= 0x01
            spilled[0].write_bytes(bytes(data))
            changed.append(client)
        return read(store, client)

    monkeypatch.setattr(ClientStateStore, "_read", change_then_read)
    out = tmp_path / "run"
    argv = ["run", QUICKSTART, *SMALL, "rounds=2", "algorithm.name=scaffold",
            "runtime.state_memory_gb=0", "--out", str(out), "--no-progress"]  # fmt: skip
    code, lines = main(argv), stderr_lines(capsys.readouterr().err)
    assert changed, "no spilled state was read back"
    assert code == 1 and len(lines) == 1, lines
    assert f"client {changed[0]}'s spilled state" in lines[0], lines[0]
    assert "changed on disk since it was written (SHA-256 mismatch)" in lines[0], lines[0]


# ------------------------------------------------------------------ runs/<name>-2


def test_a_run_name_that_exists_goes_to_name_2_never_over_it(tmp_path, capsys, monkeypatch):
    """docs/reference/run-folder.md: runs/<name>, then runs/<name>-2, -3...; the first run's
    files are left as they were."""
    monkeypatch.chdir(tmp_path)
    argv = ["run", QUICKSTART, *SMALL, "rounds=1", "name=twice", "--no-progress"]
    assert main(argv) == 0
    runs = tmp_path / "runs"
    first = (runs / "twice" / "metrics.jsonl").read_text()
    assert main(argv) == 0
    assert main(argv) == 0
    capsys.readouterr()
    assert sorted(p.name for p in runs.iterdir()) == ["twice", "twice-2", "twice-3"]
    assert (runs / "twice" / "metrics.jsonl").read_text() == first
    for name in ("twice-2", "twice-3"):
        assert json.loads((runs / name / "summary.json").read_text())["status"] == "completed"


# ------------------------------------------------------------------ W&B on resume


def test_a_resumed_run_logs_each_round_to_wandb_once(tmp_path, monkeypatch):
    """docs/howto/checkpoint-resume.md: a resumed run replays the saved rounds to W&B; its
    (offline) W&B run holds every round once, in order: no duplicate, no gap."""
    from fedsim.tracking.wandb_offline import read_offline_run

    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "run"
    options = ["tracking.wandb.enabled=true", "tracking.wandb.mode=offline", "checkpoint_every=1"]
    quick(out, "rounds=2", *options)
    before = set((out / "wandb").glob("offline-run-*"))
    quick(out, "rounds=3", *options, resume=True)
    [resumed] = set((out / "wandb").glob("offline-run-*")) - before
    history = read_offline_run(resumed).history
    # record 0 is the initial model's evaluation; 0-2 are replayed from the checkpoint
    assert [row.get("round") for row in history] == [0, 1, 2, 3]
    assert [row["_step"] for row in history] == [0, 1, 2, 3]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for row, local in zip(history, metrics, strict=True):
        assert row["acc_weighted"] == pytest.approx(local["acc_weighted"], rel=1e-12)


# ------------------------------------------------------------------ DP noise and clipping


def test_central_dp_noise_moves_the_model_by_z_times_c_over_n(tmp_path):
    """Central DP on 4 clients with uniform weights, C = 1, one round: the same run with noise
    multiplier z = 0, 1, 2. The noise is the only difference: the final parameters differ from
    z = 0 by a draw of std z * C / 4 per parameter (the noisy sum over the 4 clients,
    averaged), and z = 2 moves them exactly twice as far as z = 1 (one seeded draw, scaled)."""
    dp = ["rounds=1", "algorithm.weighting=uniform", "privacy.mode=central",
          "privacy.clip_norm=1"]  # fmt: skip
    params = {
        z: quick(tmp_path / f"z{z}", *dp, f"privacy.noise_multiplier={z}").state["params"]
        for z in (0, 1, 2)
    }
    one, two = params[1] - params[0], params[2] - params[0]
    assert one.numel() > 10_000
    assert float(one.std()) == pytest.approx(1 * 1.0 / 4, rel=0.05)
    assert float(two.std()) == pytest.approx(2 * 1.0 / 4, rel=0.05)
    torch.testing.assert_close(two, 2 * one, rtol=0, atol=1e-5)


@pytest.mark.parametrize(("clip_norm", "fraction"), [(1e-6, 1.0), (1e6, 0.0)])
def test_clipped_fraction_is_the_share_of_updates_clipped(clip_norm, fraction, tmp_path):
    """Every update of a 0.05-lr round is longer than 1e-6 and shorter than 1e6."""
    result = quick(tmp_path / "run", "rounds=1", f"privacy.clip_norm={clip_norm}")
    assert result.history[0]["clip_norm"] == clip_norm
    assert result.history[0]["clipped_fraction"] == fraction
