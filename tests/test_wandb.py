"""W&B sink: an offline run read back equals the run folder; never fails or lingers."""

from __future__ import annotations

import csv
import json

import psutil
import pytest
import yaml
from tracking_runs import GROUP, MAX_CLIENT_SERIES

from fedsim.config import WandbConfig, load_config
from fedsim.errors import ConfigError
from fedsim.tracking.base import ClientRow, RoundRecord
from fedsim.tracking.wandb_mode import resolve_mode
from fedsim.tracking.wandb_offline import read_offline_run
from fedsim.tracking.wandb_sink import WandbSink
from ray_jobs.reproduce import plan_runs

# the shared run folders (conftest.py's ``runs``) are built once in one xdist process
pytestmark = pytest.mark.xdist_group("tracking_runs")


def normalized(rows: list) -> set[tuple]:
    """Client table rows as comparable tuples (floats rounded)."""
    return {
        (int(c), int(r), round(float(a), 9), round(float(lo), 9), int(n), int(k), weight(w))
        for c, r, a, lo, n, k, w in rows
    }


def weight(value) -> float | None:
    """A client's aggregate share from W&B (None) or clients.csv ('' when it did not train)."""
    return None if value in (None, "") else round(float(value), 9)


def test_offline_run_lives_in_run_folder_and_equals_local_files(runs):
    run_dir = runs["fedavg"]
    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("run-*.wandb"))
    assert not (runs["cwfedavg"] / "wandb").exists()  # W&B off: nothing written

    wb = read_offline_run(run_dir)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [h["round"] for h in wb.history] == [m["round"] for m in metrics]
    assert wb.history[0]["bytes_up"] > 0 and wb.history[0]["bytes_down"] > 0  # a panel each
    for row, local in zip(wb.history, metrics, strict=True):
        assert row["_step"] == local["round"]
        for key, value in local.items():
            assert row[key] == pytest.approx(value, rel=1e-12), key
        hist = row["clients/accuracy_distribution"]
        assert hist["_type"] == "histogram" and sum(hist["values"]) == 6
        # one section for everything per client, no panel per client
        assert not [k for k in row if k.startswith("client/")]
        assert all(k.startswith("clients/") for k in row if k.startswith("client"))

    with open(run_dir / "clients.csv") as handle:
        clients = list(csv.DictReader(handle))
    # one multi-line chart per metric (a line per client 0..max_client_series-1), logged at
    # rounds 1 and 2; the last one holds clients.csv's values of those clients
    files = offline[0] / "files"
    for metric in ("accuracy", "loss", "weight"):
        chart = wb.charts[f"clients/{metric}"]["panel_config"]
        assert chart["panelDefId"] == "wandb/lineseries/v0"
        assert chart["stringSettings"]["xname"] == "round"
        key = f"clients/{metric}_table"
        logged = [row[key] for row in wb.history if key in row]
        assert [t["_type"] for t in logged] == ["table-file"] * 2
        table = json.loads((files / logged[-1]["path"]).read_text())
        assert table["columns"] == ["step", "lineKey", "lineVal"]
        expected = {
            (int(r["round"]), f"client {r['client']}", round(float(r[metric]), 9))
            for r in clients
            if int(r["client"]) < MAX_CLIENT_SERIES and r[metric] != ""
        }
        assert {(x, k, round(v, 9)) for x, k, v in table["data"]} == expected
        assert len(table["data"]) == len(expected)
        first = json.loads((files / logged[0]["path"]).read_text())  # at round 1: rounds 0-1
        assert {x for x, _, _ in first["data"]} <= {0, 1}

    # the per-client table (incremental: one file of new rows per round) holds clients.csv
    tables = sorted((files / "media" / "table" / "clients").glob("table_*.table.json"))
    table_rows = []
    for path in tables:
        table = json.loads(path.read_text())
        assert table["columns"] == ["client", "round", "accuracy", "loss", "n", "classes", "weight"]
        table_rows += table["data"]
    columns = ("client", "round", "accuracy", "loss", "n", "classes", "weight")
    assert normalized(table_rows) == normalized([[r[c] for c in columns] for r in clients])
    assert len(table_rows) == len(clients)

    summary = json.loads((run_dir / "summary.json").read_text())
    for which in ("best", "final"):
        for key, value in summary[which].items():
            assert wb.summary[f"{which}/{key}"] == pytest.approx(value), (which, key)
    partition = json.loads((run_dir / "partition.json").read_text())
    for key, value in partition["stats"].items():
        assert wb.summary[f"partition/{key}"] == pytest.approx(value)

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    for key, value in config.items():
        assert wb.config[key] == value, key
    # tracking.wandb.params are top-level config keys (parallel coordinates), beside the group
    assert wb.config["arm"] == "baseline" and wb.config["client_lr"] == 0.05
    assert wb.group == GROUP and wb.tags == ["test"]
    assert wb.config["partition_stats"]["stats"] == partition["stats"]

    plots = {k for k in wb.history[-1] if k.startswith("plots/")}
    assert {"plots/accuracy_curves", "plots/client_accuracy_distribution",
            "plots/label_distribution"} <= plots  # fmt: skip


def test_no_wandb_process_left_after_the_run(runs):
    assert runs["fedavg"].exists()  # the W&B run has finished
    children = psutil.Process().children(recursive=True)
    assert not [p for p in children if "wandb" in p.name()], children


def test_online_without_key_or_network_falls_back_to_offline(monkeypatch, tmp_path):
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    mode, reason = resolve_mode("online")
    assert mode == "offline" and "API key" in reason
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    mode, reason = resolve_mode("online")
    assert mode == "offline" and "not reachable" in reason
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve_mode("offline")[0] == "disabled"


def test_wandb_errors_never_fail_the_experiment(monkeypatch, tmp_path, capsys):
    import wandb

    def broken_init(**kwargs):
        raise RuntimeError("service unavailable")

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setattr(wandb, "init", broken_init)
    sink = WandbSink(WandbConfig(enabled=True, mode="offline"))
    sink.start(tmp_path, {"name": "x"}, {"stats": {}, "clients": []})
    row = ClientRow(client=0, round=0, accuracy=0.5, loss=1.0, n=10, classes=2)
    sink.log_round(RoundRecord(round=0, summary={"acc_weighted": 0.5}, clients=[row]))
    sink.finish({"best": {}, "final": {}})
    sink.close()
    assert "service unavailable" in capsys.readouterr().err


def test_wandb_log_failure_mid_run_stops_logging_only(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    sink = WandbSink(WandbConfig(enabled=True, mode="offline"))
    sink.start(tmp_path, {"name": "x"}, {"stats": {}, "clients": []})
    assert sink.run is not None

    def broken_log(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(sink.run, "log", broken_log)
    sink.log_round(RoundRecord(round=0, summary={"acc_weighted": 0.5}))
    assert sink.run is None  # gave up on W&B
    sink.log_round(RoundRecord(round=1, summary={"acc_weighted": 0.6}))
    sink.finish({"best": {}, "final": {}})
    sink.close()
    assert "disk full" in capsys.readouterr().err
    children = psutil.Process().children(recursive=True)
    assert not [p for p in children if "wandb" in p.name()]


@pytest.mark.parametrize(
    "override, expected",
    [
        ("tracking.wandb.mode=cloud", "tracking.wandb.mode='cloud': allowed: online, offline"),
        ("tracking.wandb.tags=fl", "tracking.wandb.tags='fl': must be a list of strings"),
        ("tracking.wandb.max_client_series=-1", "max_client_series=-1: must be >= 0"),
        ("tracking.wandb.enabled=maybe", "tracking.wandb.enabled='maybe': must be true or false"),
        ("tracking.wandb.projct=x", "tracking.wandb.projct='x': unknown key"),
    ],
)
def test_tracking_config_is_validated(override, expected):
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        load_config("configs/quickstart.yaml", [override])


def test_reproduce_runs_share_a_group_and_carry_their_config_file(tmp_path):
    """One ray_jobs.reproduce table is one W&B group; each run's config file is a top-level
    W&B config key beside its seed (fedsim tune's trials: tests/test_tune.py)."""
    configs = ["configs/quickstart.yaml", "configs/tune/fedavg-lr.yaml"]
    wandb = ["tracking.wandb.enabled=true", "runtime.executor=local"]
    specs = plan_runs(configs, [0, 1], wandb, tmp_path, "auto", "reproduce-1")
    assert len(specs) == 4
    for spec in specs:
        run = spec.raw["tracking"]["wandb"]
        assert run["group"] == "reproduce-1" and "reproduce" in run["tags"]
        assert run["params"] == {"config_file": spec.config} and spec.raw["seed"] == spec.seed
    named = plan_runs(configs[:1], [0], [*wandb, "tracking.wandb.group=mine"], tmp_path, "auto",
                      "reproduce-1")  # fmt: skip
    assert named[0].raw["tracking"]["wandb"]["group"] == "mine"  # a config's own group wins
    plain = plan_runs(configs[:1], [0], ["runtime.executor=local"], tmp_path, "auto", "r-1")
    assert plain[0].raw["tracking"]["wandb"]["group"] is None  # no W&B: nothing set
    assert plain[0].raw["tracking"]["wandb"]["params"] == {}
