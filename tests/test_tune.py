"""``fedsim tune``: spaces and options validated before Ray; a 4-trial ASHA search end to end."""

from __future__ import annotations

import csv
import glob
import json

import pytest

import ray_jobs.tune as tune_job
from fedsim.cli import build_parser, main
from fedsim.config import RuntimeConfig, config_from_dict, load_config
from fedsim.errors import ConfigError
from fedsim.search.options import NAMES, given_from_args, resolve_options
from fedsim.search.resources import trial_bundles, trial_executor_for, trial_runtime
from fedsim.search.space import Space, parse_space, validate_search
from fedsim.search.sweep import load_tune_config, run_tune
from fedsim.search.trial import SweepSettings, trial_config

TINY = ["rounds=2", "data.num_clients=10", "join_ratio=0.2", "runtime.executor=local"]


@pytest.mark.parametrize(
    "text, kind, args",
    [
        ("algorithm.wdr_lambda=loguniform(10,2000)", "loguniform", (10, 2000)),
        ("algorithm.wdr_lambda=uniform(0.01, 0.1)", "uniform", (0.01, 0.1)),
        ("algorithm.wdr_lambda=randint(1,4)", "randint", (1, 4)),
        ("algorithm.wdr_lambda=choice(0.01,0.05)", "choice", (0.01, 0.05)),
        ("algorithm.wdr_lambda=grid(iid, dirichlet)", "grid", ("iid", "dirichlet")),
    ],
)
def test_parse_space(text, kind, args):
    assert parse_space(text) == Space("algorithm.wdr_lambda", kind, args)


@pytest.mark.parametrize(
    "text, message",
    [
        ("client.lr=loguniform(0,1)", "loguniform needs 0 < a < b"),
        ("client.lr=uniform(1,0.1)", "uniform needs two numbers a < b"),
        ("client.lr=normal(0,1)", "expected key=space"),
        ("client.lr", "expected key=space"),
        ("client.epochs=randint(1,2.5)", "randint needs two integers"),
        ("client.lr=choice()", "choice needs at least one value"),
    ],
)
def test_bad_space_names_the_search(text, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_space(text)
    assert info.value.key == "--search"


def test_search_values_validated_against_the_config():
    base = load_config("configs/quickstart.yaml").to_dict()
    with pytest.raises(ConfigError, match="client.lr=-0.1: must be > 0"):
        validate_search(base, [parse_space("client.lr=uniform(-0.1,0.1)")])
    with pytest.raises(ConfigError, match="client.lrr=0.1: unknown key"):
        validate_search(base, [parse_space("client.lrr=choice(0.1)")])
    with pytest.raises(ConfigError, match="searched twice"):
        validate_search(base, [parse_space("client.lr=choice(0.1)")] * 2)


@pytest.mark.parametrize("path", sorted(glob.glob("configs/tune/*.yaml")))
def test_example_searches_validate(path):
    raw, section = load_tune_config(path, [])
    options = resolve_options(section, {})
    assert options.search
    cfg = config_from_dict(raw)
    validate_search(cfg.to_dict(), [parse_space(f"{k}={v}") for k, v in options.search.items()])


def test_cli_wins_over_the_file_section():
    _, section = load_tune_config("configs/tune/fedavg-lr.yaml", [])
    given = {"samples": 3, "mode": None, "search": ["client.lr=choice(0.1)"]}
    options = resolve_options(section, given)
    assert options.samples == 3 and options.mode == "max"
    assert options.search == {"client.lr": "choice(0.1)"}
    with pytest.raises(ConfigError, match="--scheduler='hyperband': allowed: asha, fifo"):
        resolve_options(section, {"scheduler": "hyperband"})
    with pytest.raises(ConfigError, match="tune.sample=3: unknown key"):
        resolve_options({"sample": 3}, {"search": ["client.lr=choice(0.1)"]})
    with pytest.raises(ConfigError, match="--trial-executor='gpu': allowed: auto, local, ray"):
        resolve_options(section, {"trial_executor": "gpu"})


def test_every_option_is_one_flag_and_one_file_key():
    """Each TuneOptions field is a ``tune:`` key and a ``--dashed`` flag of the same name."""
    args = build_parser().parse_args(
        ["tune", "c.yaml", "rounds=2", "--samples", "3", "--max-concurrent", "2", "--no-report",
         "--search", "client.lr=choice(0.1)", "client.epochs=choice(1,2)", "--quiet"]
    )  # fmt: skip
    given = given_from_args(args)
    assert set(given) == set(NAMES)
    assert given["samples"] == 3 and given["max_concurrent"] == 2
    assert given["report"] is False and given["quiet"] is True and given["mode"] is None
    assert given["search"] == ["client.lr=choice(0.1)", "client.epochs=choice(1,2)"]
    options = resolve_options({"samples": 5, "out": "runs/x", "search": {"client.lr": "x"}}, given)
    assert (options.samples, options.out, options.report) == (3, "runs/x", False)
    assert options.search == {"client.lr": "choice(0.1)", "client.epochs": "choice(1,2)"}


def test_tune_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as info:
        main(["tune", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for name in NAMES:
        assert "--" + name.replace("_", "-") in text
    assert "--no-report" in text and "loguniform(a,b)" in text


def test_cluster_job_is_fedsim_tune(monkeypatch):
    seen = []
    monkeypatch.setattr(tune_job, "main", lambda argv: seen.append(argv) or 0)
    assert tune_job.run(["configs/tune/fedavg-lr.yaml", "--samples", "2"]) == 0
    assert seen == [["tune", "configs/tune/fedavg-lr.yaml", "--samples", "2"]]


def test_bad_tune_input_exits_2_in_one_line_before_ray(tmp_path, capsys):
    out = tmp_path / "tune"
    args = ["tune", "configs/quickstart.yaml", "--search", "client.lr=loguniform(0,1)"]
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedsim: error: --search=") and err.count("\n") == 1
    assert main(["tune", "configs/quickstart.yaml", "--out", str(out)]) == 2
    assert "give at least one" in capsys.readouterr().err
    assert not out.exists()


def test_trial_resources_form_one_placement_group_per_trial():
    local = RuntimeConfig(cpus_per_worker=2.0)
    assert trial_executor_for(local, "auto") == "local"
    assert trial_bundles(local, "local") == [{"CPU": 2.0}]
    assert trial_runtime(local, "local") == {"runtime.executor": "local", "runtime.workers": None}
    gpu = RuntimeConfig(workers=3, cpus_per_worker=1.0, gpus_per_worker=0.25)
    assert trial_executor_for(gpu, "auto") == "ray"
    assert trial_bundles(gpu, "ray") == [{"CPU": 1.0}] + [{"CPU": 1.0, "GPU": 0.25}] * 3
    assert trial_runtime(gpu, "ray")["runtime.workers"] == 3
    with pytest.raises(ConfigError, match="runtime.workers=null: give a number"):
        trial_bundles(RuntimeConfig(gpus_per_worker=0.5), "ray")  # null: no pool size to book


@pytest.mark.slow
def test_asha_search_stops_bad_trials_and_writes_best_config(ray_cluster, tmp_path):
    """lr 0.05 vs 1e-4, twice each (grid x 2 samples, 2 at a time on 2 CPUs). Round 0 is the
    same for every trial (evaluation before training); after round 1 the second 1e-4 trial
    always meets a recorded 0.05 result at ASHA's rung and is stopped."""
    out = tmp_path / "tune"
    outcome = run_tune(
        "configs/quickstart.yaml",
        TINY,
        search=["client.lr=grid(0.05,0.0001)"],
        samples=2,
        scheduler="asha",
        metric="acc_weighted",
        mode="max",
        out=str(out),
        report=False,
        quiet=True,
    )
    rows = outcome.rows
    assert len(rows) == 4
    by_lr = {lr: [r for r in rows if r.params["client.lr"] == lr] for lr in (0.05, 0.0001)}
    assert all(r.status == "completed" and r.rounds == 2 for r in by_lr[0.05])
    stopped = [r for r in rows if r.status == "stopped"]
    assert stopped and all(r.rounds < 2 and r.params["client.lr"] == 0.0001 for r in stopped)
    assert rows[0].params["client.lr"] == 0.05 and rows[0].best > 0.5

    with open(out / "trials.csv") as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == 4 and {"client.lr", "status", "rounds", "best_acc_weighted"} <= set(
        table[0]
    )
    assert min(int(t["rounds"]) for t in table) < max(int(t["rounds"]) for t in table)

    best = load_config(outcome.best_yaml)  # ready to run: a valid, complete config
    assert best.client.lr == 0.05 and best.rounds == 2 and best.data.num_clients == 10
    for row in rows:  # every trial is a run folder
        lines = (out / "runs" / row.trial / "metrics.jsonl").read_text().splitlines()
        assert json.loads(lines[0])["round"] == 0


def test_trials_share_a_wandb_group_and_run_the_chosen_executor():
    base = load_config("configs/quickstart.yaml", ["tracking.wandb.enabled=true"]).to_dict()
    settings = SweepSettings(
        out="x", wandb_group="quickstart-tune-1", forced={"runtime.executor": "local"}
    )
    base["runtime"]["executor"] = "ray"
    cfg = trial_config({"client.lr": 0.01}, base, settings)
    assert cfg.client.lr == 0.01 and cfg.runtime.executor == "local"
    assert cfg.tracking.wandb.group == "quickstart-tune-1" and "tune" in cfg.tracking.wandb.tags
