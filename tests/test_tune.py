"""``fedsim tune``: spaces and options validated before Ray; searches end to end on the shared
cluster: ASHA (complete trial folders, checkpoints in every report), an interrupted search
resumed, Population Based Training, Optuna."""

from __future__ import annotations

import csv
import glob
import json
import os
import signal
import sys
from pathlib import Path

import pytest
from helpers import NARROW_CNN, untimed

import ray_jobs.tune as tune_job
from fedsim.checkpoint import Checkpoint
from fedsim.checkpoint_resume import check_resumable
from fedsim.cli import build_parser, main
from fedsim.config import RuntimeConfig, config_from_dict, load_config
from fedsim.errors import ConfigError
from fedsim.experiment import RunInterrupted, run_experiment
from fedsim.search.options import NAMES, given_from_args, resolve_options
from fedsim.search.resources import trial_bundles, trial_executor_for, trial_runtime
from fedsim.search.space import Space, changes_mid_run, parse_space, validate_search
from fedsim.search.sweep import load_tune_config, resume_tune, run_tune
from fedsim.search.trial import RESTORES, SweepSettings, TuneReportSink, trial_config
from fedsim.tracking.report import REPORT_PLOTS

# the narrow FedAvgCNN: what these runs show (trials, restores, stops) is not about its size
TINY = ["rounds=2", "data.num_clients=10", "join_ratio=0.2", "runtime.executor=local", *NARROW_CNN]


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
    with pytest.raises(ConfigError, match="--scheduler='hyperband': allowed: asha, fifo, pbt"):
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


def run_dirs(out: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted((out / "runs").iterdir())}


def metrics(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return untimed([json.loads(line) for line in lines])


def reported(out: Path, trial: str) -> list[dict]:
    """Every report of ``trial`` as Tune logged it (result.json: metrics and the config),
    by round (a PBT exploit can give the trial another folder)."""
    folders = (out / "ray_results" / "tune").glob(f"*{trial}*/result.json")
    rows = [json.loads(line) for path in folders for line in path.read_text().splitlines()]
    return sorted(rows, key=lambda row: (row["round"], row["timestamp"]))


def tune_checkpoints(out: Path, trial: str) -> list[Path]:
    """The fedsim checkpoints Tune kept of ``trial`` (ray_results/tune/<trial dir>/checkpoint_*)."""
    return sorted((out / "ray_results" / "tune").glob(f"*{trial}*/checkpoint_*/round_*.pt"))


@pytest.mark.slow
def test_asha_search_stops_bad_trials_and_writes_best_config(ray_cluster, tmp_path):
    """lr 0.05 vs 1e-4, one trial each, one at a time in grid order (0.05, then 1e-4) on one
    trial actor that Tune reuses (each actor's start costs ~10 CPU-s of imports; two at a
    time, twice each, took two actors and two more trials). Round 0 is the same for every
    trial (evaluation before training); after round 1 the 1e-4 trial meets the recorded 0.05
    result at ASHA's rung and is stopped (narrow FedAvgCNN, seeds 0/1/2: round 1 at 0.37/0.35/
    0.46 vs 0.11/0.10/0.08, round 2 at 0.66/0.68/0.63). With the report plots on (ASHA stops
    every trial at its last report: the folder must be complete by then)."""
    out = tmp_path / "tune"
    outcome = run_tune(
        "configs/quickstart.yaml",
        TINY,
        search=["client.lr=grid(0.05,0.0001)"],
        samples=1,
        scheduler="asha",
        max_concurrent=1,
        metric="acc_weighted",
        mode="max",
        out=str(out),
        quiet=True,
    )
    rows = outcome.rows
    assert len(rows) == 2
    by_lr = {lr: [r for r in rows if r.params["client.lr"] == lr] for lr in (0.05, 0.0001)}
    assert all(r.status == "completed" and r.rounds == 2 for r in by_lr[0.05])
    stopped = [r for r in rows if r.status == "stopped"]
    assert stopped == by_lr[0.0001] and all(r.final_round < 2 for r in stopped)
    assert rows[0].params["client.lr"] == 0.05 and rows[0].best > 0.5

    with open(out / "trials.csv") as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == 2 and {"client.lr", "status", "rounds", "best_acc_weighted"} <= set(
        table[0]
    )
    assert min(int(t["final_round"]) for t in table) < max(int(t["final_round"]) for t in table)

    best = load_config(outcome.best_yaml)  # ready to run: a valid, complete config
    assert best.client.lr == 0.05 and best.rounds == 2 and best.data.num_clients == 10
    for row in rows:  # every trial is a run folder
        lines = (out / "runs" / row.trial / "metrics.jsonl").read_text().splitlines()
        assert json.loads(lines[0])["round"] == 0

    # a completed trial leaves what `fedsim run` leaves with its values; a stopped one says so
    base = load_config("configs/quickstart.yaml", TINY).to_dict()
    forced = SweepSettings(out="x", forced={"checkpoint_every": 1})
    straight = {  # the completed trials' lr (0.05)
        lr: run_experiment(
            trial_config({"client.lr": lr}, base, forced), tmp_path / f"straight_{lr}",
            progress=False,
        ).run_dir
        for lr in {r.params["client.lr"] for r in rows if r.status == "completed"}
    }  # fmt: skip

    def names(folder: Path) -> set[str]:
        return {str(p.relative_to(folder)) for p in folder.rglob("*")}

    for row in rows:
        run_dir = Path(row.run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == row.status, row
        if row.status == "completed":
            alone = straight[row.params["client.lr"]]
            assert names(run_dir) == names(alone)  # plots/, checkpoints/ and all
            assert metrics(run_dir) == metrics(alone)
            assert summary["final"]["round"] == 2
            # Tune's checkpoints are the run's own (with their digests): rounds 1 and 2
            kept = tune_checkpoints(out, row.trial)
            assert [p.name for p in kept] == ["round_00001.pt", "round_00002.pt"]
            for path in kept:
                assert path.with_suffix(".sha256").is_file()
                assert json.loads((path.parent / "tune.json").read_text())["trial"] == row.trial
            mine = run_dir / "checkpoints" / "round_00002.pt"
            assert kept[-1].read_bytes() == mine.read_bytes()
        else:  # one count of rounds completed: summary.json, trials.csv, Tune's reports
            assert summary["rounds_completed"] == row.rounds == row.final_round + 1
            for name in REPORT_PLOTS:
                assert (run_dir / "plots" / name).is_file(), row
    assert not (out / ".staging").exists()
    state = json.loads((out / "search.json").read_text())  # what --resume reads
    assert state["options"]["search"] == {"client.lr": "grid(0.05,0.0001)"}
    with pytest.raises(ConfigError, match="already holds a search: continue it with"):
        run_tune("configs/quickstart.yaml", TINY, search=["client.lr=choice(0.1)"], out=str(out))


def tune_callback(round_idx: int, marker: Path):
    """A Tune callback that interrupts the search (SIGUSR1, which Tune takes as Ctrl-C) at the
    first report of ``round_idx``, once (``marker``: a restored experiment keeps callbacks)."""
    from ray import tune

    class Interrupt(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            if result.get("round") == round_idx and not marker.exists():
                marker.touch()
                os.kill(os.getpid(), signal.SIGUSR1)

    return Interrupt()


@pytest.mark.slow
def test_interrupted_search_resumes_trials_from_their_checkpoints(ray_cluster, tmp_path):
    """A search interrupted when a trial reported round 2 (Tune has registered its round-1
    checkpoint by then) is unfinished; ``resume_tune`` continues the trial from its last
    checkpoint (never from scratch: round 0 is reported once) and the trial ends as the
    uninterrupted run does."""
    out = tmp_path / "tune"
    options = dict(search=["client.lr=grid(0.05)"], samples=1, scheduler="fifo", report=False,
                   quiet=True)  # fmt: skip
    first = run_tune(
        "configs/quickstart.yaml", [*TINY, "rounds=3"], out=str(out),
        callbacks=[tune_callback(2, tmp_path / "interrupted")], **options,
    )  # fmt: skip
    assert first.interrupted and [r.status for r in first.rows] == ["unfinished"]
    assert (tmp_path / "interrupted").exists()

    resumed = resume_tune(out, quiet=True)
    assert not resumed.interrupted
    [row] = resumed.rows
    assert row.status == "completed" and row.rounds == 3
    run_dir = Path(row.run_dir)
    [restore] = [json.loads(line) for line in (run_dir / RESTORES).read_text().splitlines()]
    assert restore["from_trial"] == row.trial and restore["round"] in (1, 2)
    progress = sorted((out / "ray_results" / "tune").glob(f"*{row.trial}*/progress.csv"))
    with open(progress[0]) as handle:
        reported = [int(float(r["round"])) for r in csv.DictReader(handle)]
    before = reported[: reported.index(2) + 1]  # reports of the interrupted search: 0, 1, 2
    assert before == [0, 1, 2] and reported[len(before) :] == list(range(restore["round"] + 1, 4))

    cfg = trial_config(
        {"client.lr": 0.05},
        load_config("configs/quickstart.yaml", [*TINY, "rounds=3"]).to_dict(),
        SweepSettings(out="x", forced={"checkpoint_every": 1}),
    )
    straight = run_experiment(cfg, tmp_path / "straight", progress=False, report=False)
    assert metrics(run_dir) == metrics(straight.run_dir)
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


@pytest.mark.slow
def test_population_based_training_continues_better_trials(ray_cluster, tmp_path):
    """lr 0.05 vs 1e-4 under synchronous PBT (``pbt_synch``: both trials wait for each other
    at every perturbation, a barrier): at the first one (round 1's report) the 1e-4 trial is
    in the lower quantile and continues the 0.05 trial's checkpoint with a mutated lr, in
    every run, so one search is enough; its run folder then holds the other trial's rounds
    up to the restore, and every trial completes. (Asynchronous PBT clones only a trial that
    has a checkpoint when the other reports: it may not exploit at all in a short search.)"""
    out = tmp_path / "tune"
    outcome = run_tune(
        "configs/quickstart.yaml",
        [*TINY, "rounds=3"],
        search=["client.lr=grid(0.05,0.0001)"],
        samples=1,
        scheduler="pbt",
        perturbation_interval=2,
        pbt_synch=True,
        out=str(out),
        report=False,
        quiet=True,
    )
    rows = outcome.rows
    assert [r.status for r in rows] == ["completed", "completed"], rows
    folders = run_dirs(out)
    exploits = []
    for trial, run_dir in folders.items():
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
        restores = run_dir / RESTORES
        lines = restores.read_text().splitlines() if restores.exists() else []
        exploits += [(trial, json.loads(line)) for line in lines]
        assert [h["round"] for h in metrics(run_dir)] == [0, 1, 2, 3]
    clones = [(trial, r) for trial, r in exploits if r["from_trial"] != trial]
    assert clones, exploits
    trial, restore = clones[0]
    donor_trial = restore["from_trial"]
    # exploit: the trial that started at 1e-4 (the lower quantile) copies the 0.05 trial,
    # never the other way round (a grid's trials are numbered in its order: _00000 is 0.05)
    assert trial.endswith("_00001") and donor_trial.endswith("_00000"), restore
    assert restore["round"] == 1, restore  # the first perturbation: the second report
    # explore: the trial goes on with the values PBT chose last (a neighbour on the grid or
    # a resample), those restores.jsonl records, and reports them
    last = [r for t, r in exploits if t == trial][-1]
    assert last["values"]["client.lr"] in (0.05, 0.0001)
    assert reported(out, trial)[-1]["config"] == last["values"], last
    # up to the restored round, the trial's records are the other trial's
    cut = restore["round"]
    donor = [h for h in metrics(folders[donor_trial]) if h["round"] < cut]
    assert [h for h in metrics(folders[trial]) if h["round"] < cut] == donor


@pytest.mark.slow
def test_optuna_search_with_wandb_groups_the_trials(ray_cluster, tmp_path, monkeypatch):
    """Optuna's TPE proposes the values; every trial's W&B run is in the search's group and
    carries its sampled value as a top-level config key."""
    pytest.importorskip("optuna")
    from fedsim.tracking.wandb_offline import read_offline_run

    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "tune"
    outcome = run_tune(
        "configs/quickstart.yaml",
        [*TINY, "rounds=1", "tracking.wandb.enabled=true", "tracking.wandb.mode=offline"],
        search=["client.lr=loguniform(0.001,0.1)"],
        samples=2,
        scheduler="fifo",
        search_alg="optuna",
        max_concurrent=1,  # one trial actor, reused: each start costs ~10 CPU-s of imports
        out=str(out),
        report=False,
        quiet=True,
    )
    assert [r.status for r in outcome.rows] == ["completed", "completed"]
    groups = set()
    for row in outcome.rows:
        assert 0.001 <= row.params["client.lr"] <= 0.1
        wb = read_offline_run(row.run_dir)
        groups.add(wb.group)
        assert wb.config["client_lr"] == row.params["client.lr"] == wb.config["client"]["lr"]
        assert "tune" in wb.tags
    [group] = groups
    assert group.startswith("quickstart-tune-")
    assert json.loads((out / "search.json").read_text())["wandb_group"] == group


def test_optuna_missing_is_refused_in_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` raises ImportError
    out = tmp_path / "tune"
    args = ["tune", "configs/quickstart.yaml", "--search", "client.lr=choice(0.1)"]
    assert main([*args, "--search-alg", "optuna", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "fedsim: error: --search-alg='optuna': needs Optuna, which is not installed: "
        "pip install 'fedsim-pfl[optuna]' (or pip install optuna)\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--search-alg", "optuna", "--search", "client.epochs=grid(1,2)"],
         "client.epochs=grid(...)': optuna chooses every value itself"),
        (["--search-alg", "optuna", "--scheduler", "pbt"],
         "Population Based Training chooses the values itself"),
        (["--scheduler", "pbt", "--search", "data.num_clients=randint(5,10)"],
         "--search='data.num_clients': Population Based Training changes searched values"),
        (["--scheduler", "pbt", "--search", "algorithm.name=choice(fedavg,fedavgm)"],
         "only client.*, algorithm.* (not algorithm.name) and join_ratio"),
        (["--scheduler", "asha", "--pbt-synch"], "acts only with --scheduler pbt (not asha)"),
    ],
)  # fmt: skip
def test_strategies_refuse_what_they_cannot_search(extra, message, tmp_path, capsys):
    args = ["tune", "configs/quickstart.yaml", "--search", "client.lr=choice(0.1)"]
    assert main([*args, *extra, "--out", str(tmp_path / "tune")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "tune").exists()


def test_resume_takes_only_a_search_folder(tmp_path, capsys):
    assert main(["tune", "--resume", str(tmp_path)]) == 2
    assert "holds no fedsim tune search (no readable search.json)" in capsys.readouterr().err
    assert main(["tune", "configs/quickstart.yaml", "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "continues the search as it was started; configs/quickstart.yaml cannot" in err
    assert main(["tune", "--resume", str(tmp_path), "--samples", "3"]) == 2
    assert "--samples cannot be given with it" in capsys.readouterr().err
    assert main(["tune"]) == 2
    assert "give a YAML config (or --resume DIR)" in capsys.readouterr().err


def test_a_pbt_restore_may_change_the_searched_keys_only():
    """A PBT exploit continues another trial's checkpoint with new values of the searched
    keys; every other difference is still refused."""
    base = load_config("configs/quickstart.yaml", ["client.lr=0.05"]).to_dict()
    saved = Checkpoint(rounds_trained=2, config=base, state={}, client_states={}, records=[])
    mutated = load_config("configs/quickstart.yaml", ["client.lr=0.06"]).to_dict()
    check_resumable(saved, mutated, Path("round_00002.pt"), ("client.lr",))
    with pytest.raises(ConfigError, match="differs from the checkpoint's in client; only"):
        check_resumable(saved, mutated, Path("round_00002.pt"))
    other = load_config("configs/quickstart.yaml", ["client.lr=0.06", "client.epochs=2"])
    with pytest.raises(ConfigError, match=r"in client; only .*, client\.lr may change"):
        check_resumable(saved, other.to_dict(), Path("round_00002.pt"), ("client.lr",))
    assert changes_mid_run("client.lr") and changes_mid_run("algorithm.mu")
    assert not changes_mid_run("algorithm.name") and not changes_mid_run("data.num_clients")


@pytest.mark.slow
def test_a_trial_tune_stops_closes_its_run(tmp_path, monkeypatch):
    """Tune ends a trial by raising SystemExit inside tune.report; the trial's run then ends
    as after Ctrl-C (the round committed whole, summary.json saying stopped, a checkpoint),
    and the last evaluation is reported only once the run folder is complete."""
    reports = []

    def report(self, metrics, round_idx):
        reports.append((round_idx, sorted((self.run_dir / "checkpoints").glob("*.pt"))))
        if round_idx == 1 and self.rounds == 3:
            raise SystemExit(0)  # what Tune's session does when it stops the trial

    monkeypatch.setattr(TuneReportSink, "report", report)
    cfg = load_config("configs/quickstart.yaml", [*TINY, "rounds=3", "checkpoint_every=1"])
    sink = TuneReportSink("acc_weighted", tmp_path / "stopped", cfg.rounds)
    with pytest.raises(RunInterrupted) as stop:
        run_experiment(cfg, tmp_path / "stopped", progress=False, extra_sinks=[sink])
    assert stop.value.signal == "stopped" and stop.value.rounds_done == 2
    summary = json.loads((tmp_path / "stopped" / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["rounds_completed"] == 2
    assert summary["final"]["round"] == 1
    assert [h["round"] for h in metrics(tmp_path / "stopped")] == [0, 1]
    assert [r for r, _ in reports] == [0, 1]
    assert reports[1][1][-1].name == "round_00001.pt"  # the state round 1 evaluated

    reports.clear()  # a trial that runs to the end: its last report comes after the plots
    cfg = load_config("configs/quickstart.yaml", [*TINY, "checkpoint_every=1"])
    sink = TuneReportSink("acc_weighted", tmp_path / "done", cfg.rounds)
    run_experiment(cfg, tmp_path / "done", progress=False, extra_sinks=[sink])
    assert [r for r, _ in reports] == [0, 1] and sink.final is not None
    sink.report_final()
    assert [r for r, _ in reports] == [0, 1, 2]
    assert (tmp_path / "done" / "plots" / "accuracy_curves.png").is_file()


def test_pbt_mutations_stay_inside_the_spaces():
    lr = parse_space("client.lr=loguniform(0.001,0.1)")
    assert lr.clip(0.12) == 0.1 and lr.clip(0.0005) == 0.001 and lr.clip(0.01) == 0.01
    epochs = parse_space("client.epochs=randint(1,4)")
    assert epochs.clip(4.4) == 3 and epochs.clip(0.6) == 1
    assert parse_space("client.lr=choice(0.1,0.2)").mutation() == [0.1, 0.2]
    assert parse_space("client.lr=grid(0.1,0.2)").mutation() == [0.1, 0.2]


def test_trials_share_a_wandb_group_and_run_the_chosen_executor():
    base = load_config("configs/quickstart.yaml", ["tracking.wandb.enabled=true"]).to_dict()
    settings = SweepSettings(
        out="x", wandb_group="quickstart-tune-1", forced={"runtime.executor": "local"}
    )
    base["runtime"]["executor"] = "ray"
    cfg = trial_config({"client.lr": 0.01, "seed": 3}, base, settings)
    assert cfg.client.lr == 0.01 and cfg.runtime.executor == "local" and cfg.seed == 3
    assert cfg.tracking.wandb.group == "quickstart-tune-1" and "tune" in cfg.tracking.wandb.tags
    # the sampled values as top-level W&B config keys (seed is one already)
    assert cfg.tracking.wandb.params == {"client_lr": 0.01}
    plain = trial_config({"client.lr": 0.01}, load_config("configs/quickstart.yaml").to_dict(),
                         settings)  # fmt: skip
    assert plain.tracking.wandb.params == {} and plain.tracking.wandb.group is None
