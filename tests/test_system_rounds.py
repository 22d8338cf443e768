"""Synchronous rounds on the virtual clock, in real runs on mnist-5k (``system.*``): who
trains and counts, what a dropped client keeps, short rounds, traces, the effect of
over-selection, and the one-line refusals. The clock's rules by hand: test_system_clock.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import NARROW_CNN, TINY_MNIST, refused_check, untimed

from fedsim.config import load_config
from fedsim.experiment import run_experiment
from fedsim.runtime.executor import LocalExecutor
from fedsim.simulation import Simulation

BASE = [*TINY_MNIST, *NARROW_CNN]  # the clock's rules do not rest on the network's size


def simulate(*overrides: str):
    torch.set_num_threads(1)
    sim = Simulation(load_config(None, [*BASE, *overrides]))
    pool = LocalExecutor(sim.worker_spec, sim.data)
    try:
        return sim, sim.run(pool)
    finally:
        pool.close()


def first_attempt(*overrides: str):
    """Round 0's first attempt and outcome, replayed on a fresh clock (transfers free)."""
    sim = Simulation(load_config(None, [*BASE, *overrides]))
    clock = sim.round_kind.clock
    attempt = clock.select(0, 0, 0.0, 0)
    return sim, attempt, clock.settle(attempt, {}, {})


def test_a_gate_that_drops_nobody_aggregates_what_the_plain_round_does():
    """A deadline nobody misses sends every update on its own (the path that can leave
    clients out) and must give the plain round's model."""
    _, plain = simulate("rounds=2", "join_ratio=0.5")
    _, gated = simulate("rounds=2", "join_ratio=0.5", "system.deadline=1e9")
    assert [h["acc_weighted"] for h in gated.history] == [h["acc_weighted"] for h in plain.history]
    assert torch.allclose(gated.state["params"], plain.state["params"], atol=1e-6)
    assert [h["reported"] for h in gated.history[:2]] == [3, 3]
    assert [h["sim_time"] for h in gated.history] == sorted(h["sim_time"] for h in gated.history)


def test_surplus_and_dropped_clients_carry_no_update_and_keep_their_state():
    """Ditto keeps a personal model per client that trained: after one over-selected round
    with dropouts, exactly the kept clients have one."""
    options = ("join_ratio=0.5", "system.overcommit=2", "system.dropout=0.3",
               "system.speeds=uniform:1,3", "algorithm.name=ditto")  # fmt: skip
    _, attempt, outcome = first_attempt(*options)
    assert outcome.surplus or attempt.dropouts  # the round leaves someone out
    _, result = simulate("rounds=1", *options)
    assert sorted(result.client_store.clients()) == outcome.kept
    trained = result.history[0]
    assert trained["num_trained"] == trained["reported"] == len(outcome.kept)
    assert trained["dropouts"] == len(attempt.dropouts)
    assert trained["surplus"] == len(outcome.surplus)
    assert trained["round_time"] == pytest.approx(outcome.end)


def short_round_seed(*options: str) -> int:
    """A seed whose round 0 keeps fewer than system.min_clients in its first attempt."""
    for seed in range(50):
        _, _, outcome = first_attempt(f"seed={seed}", *options)
        if outcome.short:
            return seed
    raise AssertionError("no seed gives a short first round")


SHORT = ("join_ratio=0.5", "system.dropout=0.5", "system.min_clients=3")


def test_a_skipped_round_leaves_the_model_unchanged_and_a_retry_trains():
    seed = short_round_seed(*SHORT)
    sim, skipped = simulate(f"seed={seed}", "rounds=1", *SHORT)
    assert skipped.history[0]["skipped"] is True and skipped.history[0]["num_trained"] == 0
    assert torch.equal(skipped.state["params"], sim.initial_params)
    assert len(skipped.client_store.clients()) == 0
    _, retried = simulate(f"seed={seed}", "rounds=1", *SHORT, "system.short_round=retry")
    first = retried.history[0]
    assert first["attempts"] > 1 and first["skipped"] is False and first["num_trained"] == 3
    assert not torch.equal(retried.state["params"], sim.initial_params)
    assert first["round_time"] > 0 and retried.history[1]["sim_time"] == first["round_time"]


# lr 0.1: at 0.05 the narrow net is not at 0.8 within 6 rounds (test docstring)
EFFECT = ["data.max_samples=2000", "data.num_clients=10", "join_ratio=0.5",
          "system.speeds=slow_fraction:0.3,4", "eval.target_acc=[0.8]",
          "client.lr=0.1"]  # fmt: skip


@pytest.mark.slow
def test_overselection_keeps_slow_clients_from_setting_the_pace():
    """10 IID clients, 3 of them 4x slower, K = 5: a plain round almost always samples a
    slow client and lasts 4 tau (600 s here); sampling 8 and keeping the first 5 to finish
    never waits for one (at most 3 of 8 are slow): 150 s a round. Measured on the narrow
    FedAvgCNN at lr 0.1 (both runs), seeds 0 / 1 / 2, 6 rounds: 80 % reached at 3,000 /
    3,000 / 3,600 s plain and 750 / 900 / 600 s over-selected (ratio <= 0.3); final accuracy
    0.852 / 0.894 / 0.880 plain, 0.874 / 0.872 / 0.892 over-selected. (At lr 0.05 the
    over-selected narrow run had not reached 0.8 after 6 rounds, seed 0.)"""
    _, plain = simulate("rounds=6", *EFFECT)
    _, over = simulate("rounds=6", *EFFECT, "system.overcommit=1.6")
    assert all(h["surplus"] == 3 and h["reported"] == 5 for h in over.history[:6])
    assert [h["round_time"] for h in over.history[:6]] == [150.0] * 6
    end_plain, end_over = plain.history[-1]["sim_time"], over.history[-1]["sim_time"]
    assert end_over <= 0.4 * end_plain, (end_over, end_plain)
    assert over.history[-1]["acc_weighted"] >= plain.history[-1]["acc_weighted"] - 0.05
    t_plain, t_over = plain.summary["time_to_acc"]["0.8"], over.summary["time_to_acc"]["0.8"]
    assert t_over is not None and t_plain is not None and t_over <= 0.5 * t_plain


def test_traces_drive_the_clock_and_partition_json_records_the_map(tmp_path: Path):
    devices = tmp_path / "devices.csv"
    rows = [f"d{i},{0.01 * (i + 1)},{1e6 / (i + 1)},{4e6}" for i in range(8)]
    devices.write_text("device,seconds_per_sample,upload_bytes_per_s,download_bytes_per_s\n"
                       + "\n".join(rows) + "\n")  # fmt: skip
    online = tmp_path / "online.csv"
    online.write_text("device,start,end\n" + "\n".join(
        f"d{i},{0 if i % 2 else 1000},1e9" for i in range(6)) + "\n")  # fmt: skip
    options = [*BASE, "rounds=2", f"system.device_trace={devices}",
               f"system.availability_trace={online}"]  # fmt: skip
    result = run_experiment(load_config(None, options), tmp_path / "run", progress=False,
                            report=False)  # fmt: skip
    partition = json.loads((tmp_path / "run" / "partition.json").read_text())
    device_entries = partition["system"]["device_trace"]["entries"]
    online_entries = partition["system"]["availability_trace"]["entries"]
    assert len(set(device_entries)) == 6 and set(device_entries) <= set(range(8))
    assert sorted(online_entries) == list(range(6))
    first = result.history[0]
    assert first["available"] == 3  # the odd entries are on at t = 0
    assert first["selected"] == first["reported"] == 3 and first["round_time"] > 0
    sim = Simulation(load_config(None, options))
    compute = sim.round_kind.clock.compute
    per_sample = [0.01 * (e + 1) for e in device_entries]
    sizes = sim.data.train_sizes()
    expected = [p * n for p, n in zip(per_sample, sizes, strict=True)]
    assert compute.tolist() == pytest.approx(expected)


def test_asynchronous_speeds_is_read_as_system_speeds(capsys):
    cfg = load_config(None, ["asynchronous.speeds=slow_fraction:0.3,4"])
    assert cfg.system.speeds == "slow_fraction:0.3,4"
    assert "asynchronous.speeds is system.speeds now" in capsys.readouterr().err
    _, old = simulate("rounds=1", "asynchronous.speeds=slow_fraction:0.5,3")
    _, new = simulate("rounds=1", "system.speeds=slow_fraction:0.5,3")
    assert untimed(old.history) == untimed(new.history)


BAD = [
    ("system.overcommit=0.5", "system.overcommit=0.5: must be >= 1"),
    ("system.deadline=1", "no client can meet it: the fastest needs 30 virtual seconds"),
    ("join_ratio=0.5 system.dropout=0.1 system.min_clients=6", "at most the 5 clients"),
    ("system.device_trace=/nonexistent/devices.csv", "system.device_trace='/nonexistent"),
    ("system.availability=0", "system.availability=0"),
    ("system.dropout=0.1 privacy.mode=central privacy.clip_norm=1", "uniform sample"),
    ("system.dropout=0.1 eval.when=after_training", "a client may train a model"),
    ("system.dropout=0.1 aggregation.rule=krum", "aggregation.krum_f=1"),
    ("system.min_clients=2", "acts only with system.availability < 1"),
    ("asynchronous.speeds=constant system.speeds=constant", "system.speeds is set too"),
    (
        "algorithm.name=spcacw algorithm.targets=[0] join_ratio=1 system.dropout=0.1",
        "gradient exchanges",
    ),
]


@pytest.mark.parametrize(("overrides", "needle"), BAD, ids=[b[0] for b in BAD])
def test_bad_system_values_are_one_line_exit_2_and_no_run_folder(
    overrides, needle, capsys, tmp_path
):
    assert needle in refused_check(overrides, capsys, tmp_path)


def test_a_trace_with_fewer_entries_than_clients_says_how_they_map(capsys, tmp_path):
    devices = tmp_path / "devices.csv"
    devices.write_text("seconds_per_sample,upload_bytes_per_s,download_bytes_per_s\n"
                       "0.1,inf,inf\n0.2,inf,inf\n")  # fmt: skip
    line = refused_check(f"system.device_trace={devices}", capsys, tmp_path)
    assert "2 entries" in line and "10 clients" in line and "seeded" in line


def test_report_compares_runs_on_one_time_axis(tmp_path: Path, capsys):
    from helpers import invoke_cli

    from fedsim.tracking.compare_plot import time_panels
    from fedsim.tracking.run_data import load_run

    torch.set_num_threads(1)
    for name, extra in (("plain", []), ("slow", ["system.speeds=slow_fraction:0.5,4"]),
                        ("over", ["system.speeds=slow_fraction:0.5,4", "join_ratio=0.5",
                                  "system.overcommit=2"])):  # fmt: skip
        cfg = load_config(None, [*BASE, "rounds=2", f"name={name}", *extra])
        run_experiment(cfg, tmp_path / name, progress=False, report=False)
    runs = [load_run(tmp_path / n) for n in ("plain", "slow", "over")]
    (timed_axis, timed), (round_axis, untimed) = time_panels(runs)
    assert (timed_axis, round_axis) == ("virtual time (s)", "round")
    assert [c[0] for c in timed] == ["slow (fedavg)", "over (fedavg)"]
    assert [c[0] for c in untimed] == ["plain (fedavg)"] and untimed[0][1] == [0, 1, 2]
    slow_x, over_x = timed[0][1], timed[1][1]
    assert over_x[-1] < slow_x[-1]  # the over-selected rounds never wait for a slow client
    figure, cwd = tmp_path / "compare.png", tmp_path / "cwd"
    cwd.mkdir()
    code, err = invoke_cli(["report", *(str(tmp_path / n) for n in ("plain", "slow", "over")),
                            "--compare", str(figure)], capsys, cwd)  # fmt: skip
    assert code == 0, err
    assert figure.stat().st_size > 0


FEDBUFF = ["asynchronous.enabled=true", "asynchronous.buffer_size=3"]


def test_asynchronous_rounds_time_transfers_and_dispatch_only_online_clients():
    """FedBuff on the same clock: a client's round is download + compute + upload of the
    model (its schedule is fixed before training, so a full model each way), and a slot is
    filled only with a client online at that moment."""
    network = ["system.upload_bandwidth=1e5", "system.download_bandwidth=1e6"]
    sim = Simulation(load_config(None, [*BASE, "rounds=2", *FEDBUFF, *network]))
    plan = sim.round_kind.plan
    model = 4 * sim.initial_params.numel()
    compute = plan.clock.durations(range(6), sim.data.train_sizes())
    assert plan.durations.tolist() == pytest.approx((compute + model / 1e6 + model / 1e5).tolist())
    _, timed = simulate("rounds=2", *FEDBUFF, *network)
    _, untimed_run = simulate("rounds=2", *FEDBUFF)
    assert timed.history[-1]["sim_time"] > untimed_run.history[-1]["sim_time"]
    assert [h["acc_weighted"] for h in timed.history] == [
        h["acc_weighted"] for h in untimed_run.history
    ]  # every client equally slower: the same schedule, later
    sim = Simulation(load_config(None, [*BASE, "rounds=2", *FEDBUFF, "system.availability=0.5"]))
    schedule = sim.round_kind.plan.schedule()
    online = schedule.availability
    for _ in range(6):
        aggregation = schedule.next_aggregation()
        for u in aggregation.updates:
            assert online.online(u.dispatched, u.step)[u.client]


def test_fedscale_traces_run_end_to_end(tmp_path: Path):
    """FedScale's two published files (pickled dicts, no extension), written here in their
    layout: 8 devices, 6 clients drawn onto them, the behaviour trace repeating daily."""
    import pickle

    capacity = {1000 + i: {"computation": 20.0 + 10 * i, "communication": 800.0 + 100 * i}
                for i in range(8)}  # fmt: skip
    behave = {2000 + i: {"active": [0, 40000], "inactive": [30000 + 1000 * i, 86400],
                         "finish_time": 86400, "duration": 0, "model": "test"}
              for i in range(8)}  # fmt: skip
    devices, online = tmp_path / "client_device_capacity", tmp_path / "client_behave_trace"
    devices.write_bytes(pickle.dumps(capacity))
    online.write_bytes(pickle.dumps(behave))
    options = [*BASE, "rounds=2", "join_ratio=0.5", "system.overcommit=1.5",
               f"system.device_trace={devices}", f"system.availability_trace={online}"]  # fmt: skip
    result = run_experiment(load_config(None, options), tmp_path / "run", progress=False,
                            report=False)  # fmt: skip
    assert result.summary["status"] == "completed"
    partition = json.loads((tmp_path / "run" / "partition.json").read_text())
    entries = partition["system"]["device_trace"]["entries"]
    sim = Simulation(load_config(None, options))
    # FedScale: 3 x samples x computation / 1000 s to train (3: a backward pass is ~2 forwards)
    expected = [3 * (20.0 + 10 * e) / 1000 * n for e, n in zip(entries, sim.data.train_sizes(),
                                                               strict=True)]  # fmt: skip
    assert sim.round_kind.clock.compute.tolist() == pytest.approx(expected)
    first = result.history[0]
    assert first["available"] == 6 and first["selected"] == 5 and first["reported"] == 3
