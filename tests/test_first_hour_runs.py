"""Issue 56, a newcomer's first runs: every check before Ray (point 2), and small runs that
do not wait for Ray's start-up (point 3)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fedsim.config import RuntimeConfig, load_config
from fedsim.runtime import executor_choice
from fedsim.runtime.executor_choice import RAY_START_S, RunWork, choose_executor
from tests.helpers import one_line_error

QUICKSTART = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")


def test_2_a_wrong_column_on_ray_is_refused_before_ray_starts(tmp_path, capsys, monkeypatch):
    from fedsim.runtime import pool_start

    monkeypatch.setattr(pool_start, "start_ray", lambda *a: pytest.fail("Ray started first"))
    csv = tmp_path / "rows.csv"
    csv.write_text("f0,f1,label\n" + "".join(f"{i},{i % 7},{i % 2}\n" for i in range(60)))
    work = tmp_path / "work"
    work.mkdir()
    argv = ["run", QUICKSTART, "--no-progress", "runtime.executor=ray", "rounds=1",
            f"data.name=hf:{csv}", "data.input_column=f9", "data.num_clients=2"]  # fmt: skip
    line = one_line_error(argv, capsys, work)
    assert "data.input_column='f9': no such column" in line


def _work(**kw) -> RunWork:
    base = dict(rounds=20, train_samples=3750, eval_samples=1250, evaluations=21,
                params=582_026, cohort=20)  # fmt: skip
    return RunWork(**{**base, **kw})


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(executor_choice, "cpus_here", lambda: 2)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setitem(sys.modules, "ray", None)  # no Ray started in this process


def test_3_a_small_run_goes_local_and_says_how_to_force_ray(two_cpus):
    choice = choose_executor(RuntimeConfig(), _work())  # the quickstart: ~47 s of work
    assert choice.executor == "local" and choice.auto
    assert choice.line().endswith("runtime.executor=ray forces the other")
    assert f"less than Ray's ~{RAY_START_S:.0f} s start-up" in choice.line()


def test_3_a_large_run_goes_to_ray(two_cpus):
    choice = choose_executor(RuntimeConfig(), _work(rounds=200))
    assert choice.executor == "ray" and "runtime.executor=local forces" in choice.line()


@pytest.mark.parametrize(
    ("runtime", "work", "executor"),
    [
        (RuntimeConfig(workers=2), _work(rounds=1), "ray"),  # workers asked for
        (RuntimeConfig(address="auto"), _work(rounds=1), "ray"),  # a cluster to join
        (RuntimeConfig(), _work(rounds=10_000, cohort=1), "local"),  # one client a round
        (RuntimeConfig(executor="ray"), _work(rounds=1), "ray"),  # given: kept
        (RuntimeConfig(executor="local"), _work(rounds=10_000), "local"),
    ],
)
def test_3_what_decides_the_executor(two_cpus, runtime, work, executor):
    assert choose_executor(runtime, work).executor == executor


def test_3_one_cpu_never_waits_for_ray(monkeypatch):
    monkeypatch.setattr(executor_choice, "cpus_here", lambda: 1)
    monkeypatch.setattr(executor_choice, "cluster_given", lambda runtime: None)
    assert choose_executor(RuntimeConfig(), _work(rounds=10_000)).executor == "local"


def test_3_the_default_is_auto_and_check_says_the_choice(two_cpus):
    from fedsim.experiment import check_experiment

    cfg = load_config(QUICKSTART, ["runtime.executor=auto", "data.max_samples=400"])
    assert load_config(None).runtime.executor == "auto"
    line = check_experiment(cfg)
    assert line.endswith("start-up)") and "executor local (auto: ~" in line


def test_11_configure_optimizers_raising_on_model_args_is_one_line():
    from types import SimpleNamespace

    import pytorch_lightning as pl
    import torch

    from fedsim.errors import ConfigError
    from fedsim.runtime.model_contract import check_model

    class OwnLR(pl.LightningModule):
        def __init__(self, lr):
            super().__init__()
            self.lr, self.layer = lr, torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.layer(x)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    cfg = load_config(None, ["model.args={lr: abc}", "client.lr=null"])
    algorithm = SimpleNamespace(model_needs=(), trains_by_exchange=False)
    with pytest.raises(ConfigError) as err:
        check_model(cfg, OwnLR("abc"), algorithm, "cpu")
    text = str(err.value)
    assert err.value.key == "model.args" and "\n" not in text
    assert "OwnLR.configure_optimizers raised TypeError" in text


def test_9_the_deployed_configs_header_says_what_its_rounds_keep():
    """The header's numbers against the run's own clock (who is sampled, drops out, is late:
    fixed by the seed and the trace, independent of training)."""
    import re

    from fedsim.rounds.clock.build import sync_clock
    from fedsim.simulation import Simulation

    path = Path(QUICKSTART).parent / "system" / "mnist5k-deployed.yaml"
    header = " ".join(line.lstrip("# ") for line in path.read_text().splitlines()
                      if line.startswith("#"))  # fmt: skip
    cfg = load_config(path, ["runtime.executor=local"])
    sim = Simulation(cfg)
    clock = sync_clock(cfg, sim.plan, sim.data.train_sizes())
    size = int(sim.initial_params.numel()) * 4  # FedAvg sends the model each way
    t, kept, dropped, late, sampled = 0.0, [], [], [], set()
    for r in range(cfg.rounds):
        a = clock.select(r, 0, t, r)
        out = clock.settle(a, dict.fromkeys(a.trains, size), dict.fromkeys(a.trains, size))
        kept.append(len(out.kept))
        dropped.append(len(a.dropouts))
        late.append(len(out.late))
        sampled.add(len(a.selected))
        t = out.end
    assert f"samples {sampled.pop()} clients" in header and not sampled
    assert f"keeps {min(kept)}-{max(kept)} reports, {round(sum(kept) / len(kept))} on av" in header
    assert f"Dropouts ({min(dropped)}-{max(dropped)} a round)" in header
    assert f"deadline ({min(late)}-{max(late)})" in header
    assert not re.search(r"keeps the first 10 within", header)  # the old, wrong claim


def test_15_a_resume_on_changed_data_is_refused(tmp_path, capsys):
    from fedsim.cli import main

    csv = tmp_path / "rows.csv"
    rows = [f"{i * 0.1:.1f},{(i * 7) % 5},{i % 2}" for i in range(80)]
    csv.write_text("f0,f1,label\n" + "\n".join(rows) + "\n")
    out = tmp_path / "run"
    argv = ["run", QUICKSTART, "--no-progress", "--out", str(out), "runtime.executor=local",
            f"data.name=hf:{csv}", "data.input_column=[f0,f1]", "data.num_clients=2",
            "model.name=mlp", "model.hidden=[8]", "checkpoint_every=1", "eval_every=1"]  # fmt: skip
    assert main([*argv, "rounds=1"]) == 0
    rows[3] = "9.9,1,1"  # one row edited after the run started
    csv.write_text("f0,f1,label\n" + "\n".join(rows) + "\n")
    capsys.readouterr()
    assert main([*argv, "rounds=2", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the data changed since the run started" in err
    assert (out / "checkpoints").is_dir() and "round 1" not in (out / "metrics.jsonl").read_text()
