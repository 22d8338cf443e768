"""Asynchronous rounds (``asynchronous.*``): the event order and weights by hand, the loop
on real data (equal to sync FedAvg when the buffer is everyone, the same on the Ray pool),
drop vs discount, bad input, and the effect of slow clients against simulated time."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from helpers import NARROW_CNN, TINY_MNIST, lent_ray_executor, refused_check, untimed

from fedsim.client_work import LocalWork
from fedsim.config import load_config
from fedsim.rounds.clock.schedule import AsyncSchedule
from fedsim.rounds.clock.staleness import (
    buffered_weights,
    default_max_staleness,
    staleness_weights,
)
from fedsim.rounds.clock.sync import AlwaysOnline, Rules, SyncClock
from fedsim.rounds.clock.virtual import Network, VirtualClock
from fedsim.runtime.executor import LocalExecutor
from fedsim.simulation import Simulation

# ------------------------------------------------------------------ the schedule, by hand


def three_clients(buffer_size: int = 2, dropout: float = 0.0) -> AsyncSchedule:
    """Clients 0, 1, 2 take 1, 2 and 5 units of virtual time; all three train at once."""
    clock = VirtualClock(np.array([1.0, 2.0, 5.0]), dropout=dropout, seed=(0,))
    return AsyncSchedule(clock, clock.durations(range(3), 1.0), 3, buffer_size, seed=0)


def events(aggregation) -> list[tuple[int, int]]:
    return [(u.client, u.version) for u in aggregation.updates]


def test_event_order_and_staleness_by_hand():
    schedule = three_clients()
    # t=1: 0 arrives (buffer 1 of 2); t=2: 1 arrives -> aggregation 0 (version 1); 0, 1 restart
    first = schedule.next_aggregation()
    assert (first.index, first.time, events(first)) == (0, 2.0, [(0, 0), (1, 0)])
    # t=3: 0 (version 1), t=4: 1 (version 1) -> aggregation 1; both restart from version 2
    second = schedule.next_aggregation()
    assert (second.time, events(second)) == (4.0, [(0, 1), (1, 1)])
    # t=5: 0 (version 2) and 2 (still version 0) tie: lower id first -> aggregation 2
    third = schedule.next_aggregation()
    assert (third.time, events(third)) == (5.0, [(0, 2), (2, 0)])
    assert third.staleness().tolist() == [0, 2] and third.delays().tolist() == [1, 5]
    # t=6: 0 (version 3, restarted at 5) and 1 (version 2, restarted at 4) tie again
    fourth = schedule.next_aggregation()
    assert (fourth.time, events(fourth)) == (6.0, [(0, 3), (1, 2)])
    assert fourth.staleness().tolist() == [0, 1]
    # 0 and 1 restart from version 4; 2 still trains from version 3: 0..2 can be forgotten
    assert schedule.pending_versions() == {3, 4}


def test_weights_of_the_stale_update_by_hand():
    schedule = three_clients()
    for _ in range(2):
        schedule.next_aggregation()
    third = schedule.next_aggregation()
    max_staleness = default_max_staleness(schedule.durations)  # 2 x median(1, 2, 5) = 4
    stale = third.delays() > max_staleness
    assert max_staleness == 4.0 and stale.tolist() == [False, True]
    s = third.staleness()
    # FedBuff's d(s) = (1 + s)^-1/2: the stale update (s = 2) keeps 1/sqrt(3) of its weight
    discount = staleness_weights(s, kind="polynomial", a=0.5, stale=stale)
    assert discount == pytest.approx([1, 3**-0.5])
    drop = staleness_weights(s, kind="polynomial", a=0.5, stale=stale, policy="drop")
    assert drop.tolist() == [1, 0]
    # the server's step x + sum_i p_i d(s_i) delta_i, p_i = n_i / sum n (equal n here)
    assert buffered_weights(s, stale=stale) == pytest.approx([0.5, 0.5 * 3**-0.5])
    assert buffered_weights(s, stale=stale, policy="drop").tolist() == [1, 0]


def test_fedasync_aggregates_every_arrival():
    schedule = three_clients(buffer_size=1)
    got = [events(schedule.next_aggregation()) for _ in range(4)]
    # t=1: 0; 0 restarts (v1) and is back at t=2 together with 1 (v0): lower id first
    assert got == [[(0, 0)], [(0, 1)], [(1, 0)], [(0, 2)]]


def test_dropouts_never_arrive_and_are_counted():
    clock = VirtualClock(np.ones(10), dropout=0.3, seed=(5,))
    schedule = AsyncSchedule(clock, np.arange(1.0, 11.0), 6, 3, seed=5)
    arrived, dropped = 0, 0
    for _ in range(30):
        aggregation = schedule.next_aggregation()
        assert not any(u.dropped_out for u in aggregation.updates)
        assert all(u.dropped_out for u in aggregation.dropouts)
        arrived += len(aggregation.updates)
        dropped += len(aggregation.dropouts)
    assert arrived == 90 and 0.15 < dropped / (arrived + dropped) < 0.45


def test_a_client_trains_at_most_once_per_version():
    clock = VirtualClock(np.array([1.0, 1.0, 1.5, 3.0, 7.0]), seed=(1,))
    schedule = AsyncSchedule(clock, clock.durations(range(5), 1.0), 4, 2, seed=1)
    seen = set()
    for _ in range(40):
        for u in schedule.next_aggregation().updates:
            assert (u.client, u.version) not in seen
            seen.add((u.client, u.version))


def test_availability_trace_fills_slots_only_with_online_clients_by_hand():
    """Durations 10, 10, 40; client 0 always on, client 1 on from t = 50, client 2 on until
    t = 30; C = 3, K = 1. Client 2 is dispatched at 0 but goes off at 30, before it would
    arrive at 40 (a dropout noticed at 30); client 1 waits for its wake-up at 50."""
    from fedsim.rounds.clock.sync import OnlineByTrace
    from fedsim.system.traces import AvailabilityTrace

    trace = AvailabilityTrace(([(0, np.inf)], [(50, np.inf)], [(0, 30)]), None, "test")
    clock = VirtualClock(np.array([10.0, 10.0, 40.0]), seed=(0,))
    schedule = AsyncSchedule(clock, clock.durations(range(3), 1.0), 3, 1, 0, OnlineByTrace(trace))
    assert sorted(f.client for f in schedule.flights()) == [0, 2]
    aggregations = [schedule.next_aggregation() for _ in range(4)]
    assert [a.time for a in aggregations] == [10, 20, 30, 40]
    assert [[u.client for u in a.updates] for a in aggregations] == [[0], [0], [0], [0]]
    assert [[(d.client, d.arrives) for d in a.dropouts] for a in aggregations[3:]] == [[(2, 30)]]
    saved = schedule.state_dict()
    assert saved["wakes"] and saved["wakes"][0][0] == 50
    again = AsyncSchedule(clock, clock.durations(range(3), 1.0), 3, 1, 0, OnlineByTrace(trace))
    again.load_state_dict(saved)
    fifth, resumed = schedule.next_aggregation(), again.next_aggregation()
    assert fifth == resumed and fifth.time == 50
    assert 1 in {f.client for f in schedule.flights()}  # came online at 50 and was dispatched
    assert next(f for f in schedule.flights() if f.client == 1).dispatched == 50


def test_a_synchronous_round_waits_for_the_slowest_sampled_client():
    cohorts = {0: [0, 1], 1: [1, 2], 2: [0]}
    clock = VirtualClock(np.array([1.0, 3.0, 2.0]))
    per_sample = clock.seconds_per_sample
    sync = SyncClock(clock, per_sample, Network.free(3), AlwaysOnline(3), Rules(2), seed=0)
    times = []
    for r in range(3):
        times.append(sync.time)
        attempt = sync.plain_attempt(r, cohorts[r], sync.time, r)
        sync.time = sync.settle(attempt, {}, {}).end
    assert [*times, sync.time] == [0, 3, 6, 7]
    assert LocalWork(epochs=2).all_samples([10, 20]).tolist() == [20, 40]


# ------------------------------------------------------------------ on real data

BASE = TINY_MNIST
SLOW = "system.speeds=slow_fraction:0.34,4"
FEDBUFF = ["asynchronous.enabled=true", "asynchronous.buffer_size=3", SLOW]


def simulate(*overrides: str, executor=None, net: tuple[str, ...] = NARROW_CNN):
    """A run of BASE + ``overrides``, on the narrow FedAvgCNN unless ``net`` says otherwise
    (the clock's rules do not rest on the network's size)."""
    torch.set_num_threads(1)
    sim = Simulation(load_config(None, [*BASE, *net, *overrides]))
    pool = LocalExecutor(sim.worker_spec, sim.data) if executor is None else executor(sim)
    try:
        return sim, sim.run(pool)
    finally:
        pool.close()


@functools.cache
def cached(*overrides: str):
    return simulate(*overrides)


def test_buffer_of_everyone_at_equal_speed_is_sync_fedavg():
    """K = C = all clients, equal speeds: every update is fresh (s = 0, d = 1), so each
    aggregation is a synchronous FedAvg round (to float rounding: x + (x_i - x))."""
    _, sync = cached("rounds=3")
    _, everyone = cached("rounds=3", "asynchronous.enabled=true", "asynchronous.buffer_size=6")
    assert torch.allclose(everyone.state["params"], sync.state["params"], atol=1e-5)
    for a, s in zip(everyone.history, sync.history, strict=True):
        assert a["acc_weighted"] == pytest.approx(s["acc_weighted"], abs=0.01)
        assert "sim_time" in a
    assert [h.get("staleness_mean") for h in everyone.history[:3]] == [0, 0, 0]


def test_metrics_of_an_asynchronous_run():
    sim, result = cached("rounds=4", *FEDBUFF)
    plan = sim.round_kind.plan
    tau = float(np.median(plan.durations))
    assert plan.max_staleness == pytest.approx(2 * tau)
    times = [h["sim_time"] for h in result.history]
    assert times[0] == 0 and times == sorted(times) and len(times) == 5
    training = result.history[:4]
    assert all(h["arrivals"] == 3 and h["num_trained"] == 3 for h in training)
    assert all(h["dropouts"] == 0 and h["stale_dropped"] == 0 for h in training)
    assert any(h["stale"] > 0 for h in training)  # the 4x slow clients are away 4 tau > 2 tau
    assert "arrivals" not in result.history[-1]  # the final evaluation-only round


def test_sync_run_with_speeds_logs_its_simulated_time():
    sim, result = cached("rounds=2", SLOW)
    slowest = sim.round_kind.clock.compute.max()  # every client trains every round
    assert [h["sim_time"] for h in result.history] == pytest.approx([0, slowest, 2 * slowest])
    _, plain = cached("rounds=2")
    assert "sim_time" not in plain.history[0]


def test_drop_leaves_stale_updates_out_and_discount_keeps_them():
    _, discount = cached("rounds=4", *FEDBUFF)
    _, drop = cached("rounds=4", *FEDBUFF, "asynchronous.stale=drop")
    stale = [h["stale"] for h in discount.history[:4]]
    assert stale == [h["stale"] for h in drop.history[:4]] and sum(stale) > 0  # same schedule
    assert [h["stale_dropped"] for h in drop.history[:4]] == stale
    assert not torch.equal(drop.state["params"], discount.state["params"])


def test_fedper_and_fedprox_run_asynchronously():
    # PFLlib's widths: the narrow net's FedPer ends at 0.37 (lr 0.05), 0.47-0.54 at lr 0.1
    # (seeds 0-2): too near 0.45
    sim, fedper = simulate("rounds=6", "algorithm.name=fedper", *FEDBUFF, net=())
    personal = sim.algorithm.personal_ranges[1]
    start = sim.initial_params
    for a, b in personal:  # the server never averages personal layers
        assert torch.equal(fedper.state["params"][a:b], start[a:b])
    assert fedper.history[-1]["acc_weighted"] > 0.45  # measured 0.593 (sync FedPer: 0.547)
    _, fedprox = simulate(
        "rounds=6", "algorithm.name=fedprox", "algorithm.mu=0.01", *FEDBUFF, net=()
    )
    assert fedprox.history[-1]["acc_weighted"] > 0.45  # measured 0.687 (sync: 0.693)


@pytest.mark.slow
def test_ray_pool_equals_local_executor(ray_pool):
    options = ("rounds=3", *FEDBUFF, "system.dropout=0.2", "asynchronous.concurrency=5")
    _, local = simulate(*options)
    _, ray_run = simulate(*options, executor=lambda sim: lent_ray_executor(sim, ray_pool))
    assert untimed(ray_run.history) == untimed(local.history)
    assert torch.equal(ray_run.state["params"], local.state["params"])


def test_run_folder_has_sim_time_and_its_plot(tmp_path):
    import json

    from fedsim.experiment import run_experiment

    torch.set_num_threads(1)
    cfg = load_config(None, [*BASE, *NARROW_CNN, "rounds=2", *FEDBUFF])
    run_experiment(cfg, tmp_path / "run", progress=False)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert all("sim_time" in json.loads(line) for line in lines)
    assert (tmp_path / "run" / "plots" / "accuracy_vs_sim_time.png").stat().st_size > 0
    assert (tmp_path / "run" / "plots" / "accuracy_curves.png").is_file()  # against rounds


# ------------------------------------------------------------------ bad input

BAD = [
    ("asynchronous.enabled=true asynchronous.buffer_size=11", "asynchronous.buffer_size=11"),
    ("asynchronous.enabled=true asynchronous.concurrency=12", "asynchronous.concurrency=12"),
    ("asynchronous.enabled=true algorithm.name=local", "local uploads no model update"),
    ("asynchronous.enabled=true algorithm.name=fedamp", "fedamp uploads no model update"),
    ("asynchronous.enabled=true algorithm.name=cwfedavg", "cwfedavg has no sum"),
    ("asynchronous.enabled=true algorithm.name=spcacw", "gradient exchanges"),
    ("system.dropout=1", "system.dropout=1"),
    ("system.speeds=gamma:1,2", "system.speeds='gamma:1,2'"),
    (
        "asynchronous.enabled=true system.upload_bandwidth=1e6 compression.kind=topk",
        "compression.kind='topk': with asynchronous.enabled=true and system bandwidths",
    ),
    ("asynchronous.enabled=true system.overcommit=1.3", "system.overcommit=1.3: acts only"),
    ("asynchronous.stale=ignore", "allowed: discount, drop"),
    ("asynchronous.max_staleness=0", "asynchronous.max_staleness=0"),
    (
        "asynchronous.enabled=true asynchronous.buffer_size=3 aggregation.rule=krum",
        "aggregation.krum_f=1",
    ),
]


@pytest.mark.parametrize(("overrides", "needle"), BAD)
def test_bad_asynchronous_options_are_one_line_exit_2_and_no_run_folder(
    overrides, needle, capsys, tmp_path
):
    assert needle in refused_check(overrides, capsys, tmp_path)


# ------------------------------------------------------------------ the effect, measured

EFFECT = [
    "data.max_samples=2000",
    "data.num_clients=10",
    "system.speeds=slow_fraction:0.3,4",
    "client.lr=0.1",  # the narrow net at 0.05: sync's 2 rounds end at 0.44 (seed 0)
]
FEDBUFF5 = ["asynchronous.enabled=true", "asynchronous.buffer_size=5"]


@pytest.mark.slow
def test_with_slow_clients_async_reaches_sync_accuracy_in_less_simulated_time():
    """mnist-5k (2,000 digits) IID over 10 clients, 3 of them 4x slower: synchronous FedAvg
    waits 4 tau a round. FedBuff (K = 5, all 10 clients in flight) reaches the accuracy sync
    has after 2 rounds (8 tau) in a fraction of that simulated time. Measured on the narrow
    FedAvgCNN at lr 0.1 (both), seeds 0 / 1 / 2: sync 0.626 / 0.642 / 0.644 after 2 rounds
    (1,200 units of virtual time); FedBuff passes it at 450 / 300 / 450 (0.25-0.375 of the
    time) and holds 0.908 / 0.890 / 0.888 at 1,200. A few seconds."""
    sim, sync = simulate("rounds=2", *EFFECT)
    target, horizon = sync.history[-1]["acc_weighted"], sync.history[-1]["sim_time"]
    cfg = load_config(None, [*BASE, *NARROW_CNN, *EFFECT, *FEDBUFF5])
    schedule, rounds = Simulation(cfg).round_kind.plan.schedule(), 0
    while schedule.time < horizon:  # the schedule is known before training
        schedule.next_aggregation()
        rounds += 1
    _, fedbuff = simulate(f"rounds={rounds}", *EFFECT, *FEDBUFF5)
    reached = [h["sim_time"] for h in fedbuff.history if h["acc_weighted"] >= target]
    assert target > 0.5 and reached
    assert reached[0] <= 0.5 * horizon
    assert fedbuff.history[-1]["acc_weighted"] > target + 0.1  # far ahead at sync's time
