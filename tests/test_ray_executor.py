"""The Ray worker pool: pool sizing, transport, extra task kinds, equality with the local
executor, recovery from a worker killed mid-round, and a clean shutdown."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import psutil
import pytest
import torch
from helpers import NARROW_CNN, lent_ray_executor, untimed, wait_until_gone
from pool_classes import FedAvgWithMemory

from fedsim.client_work import LocalWork
from fedsim.config import RuntimeConfig, load_config
from fedsim.errors import ConfigError
from fedsim.runtime.executor import LocalExecutor
from fedsim.runtime.factory import make_executor
from fedsim.runtime.pool_plan import plan_pool
from fedsim.runtime.ray_executor import RayExecutor
from fedsim.runtime.task_cost import task_cost
from fedsim.runtime.worker import (
    ClientTask,
    ClientWorker,
    GradientTask,
    WorkerResult,
)
from fedsim.simulation import Simulation
from fedsim.wire import WireTensor, to_wire
from lightning_modules.flat_params import bind_flat_parameters
from lightning_modules.registry import build_model


def small_config(*overrides: str):
    """2,000 digits of mnist-5k, 10 Dirichlet clients, 2 rounds, the narrow FedAvgCNN: real
    data, seconds per run."""
    return load_config(
        None,
        [
            "data.name=mnist-5k",
            "data.max_samples=2000",
            "data.num_clients=10",
            "data.partition.alpha=0.5",
            "rounds=2",
            "client.lr=0.05",
            *NARROW_CNN,  # the narrow FedAvgCNN: pool equals local for any net
            *overrides,
        ],
    )


# ------------------------------------------------------------------ pool sizing (no Ray)


def test_pool_fills_the_cpus_by_default():
    plan = plan_pool(RuntimeConfig(), cluster_cpus=2, cluster_gpus=0)
    assert (plan.workers, plan.cpus_per_worker, plan.gpus_per_worker, plan.threads) == (2, 1, 0, 1)
    plan = plan_pool(RuntimeConfig(cpus_per_worker=2), cluster_cpus=8, cluster_gpus=0)
    assert (plan.workers, plan.threads) == (4, 2)


def test_pool_with_gpus_uses_workers_per_gpu():
    plan = plan_pool(RuntimeConfig(workers_per_gpu=4), cluster_cpus=32, cluster_gpus=2)
    assert (plan.workers, plan.gpus_per_worker) == (8, 0.25)
    capped = plan_pool(RuntimeConfig(workers_per_gpu=4), cluster_cpus=6, cluster_gpus=2)
    assert capped.workers == 6  # not more workers than CPUs
    cpu_only = plan_pool(RuntimeConfig(gpus_per_worker=0), cluster_cpus=4, cluster_gpus=2)
    assert (cpu_only.workers, cpu_only.gpus_per_worker) == (4, 0)
    on_cpu = plan_pool(RuntimeConfig(device="cpu"), cluster_cpus=4, cluster_gpus=2)
    assert (on_cpu.workers, on_cpu.gpus_per_worker) == (4, 0)


def test_device_cuda_without_gpus_is_a_config_error():
    with pytest.raises(ConfigError, match=r"runtime.device='cuda': the cluster has 0 GPUs"):
        plan_pool(RuntimeConfig(device="cuda"), cluster_cpus=4, cluster_gpus=0)
    with pytest.raises(ConfigError, match=r"runtime.device='cuda:0'.*gpus_per_worker=0"):
        plan_pool(RuntimeConfig(device="cuda:0", gpus_per_worker=0), cluster_cpus=4, cluster_gpus=1)


def test_pool_that_cannot_fit_is_a_config_error():
    with pytest.raises(ConfigError, match="runtime.workers=3.*need 3 CPUs.*has 2"):
        plan_pool(RuntimeConfig(workers=3), cluster_cpus=2, cluster_gpus=0)
    with pytest.raises(ConfigError, match="runtime.gpus_per_worker=0.5"):
        plan_pool(RuntimeConfig(workers=2, gpus_per_worker=0.5), cluster_cpus=4, cluster_gpus=0)
    with pytest.raises(ConfigError, match="runtime.cpus_per_worker=4"):
        plan_pool(RuntimeConfig(cpus_per_worker=4), cluster_cpus=2, cluster_gpus=0)
    # a GPU per worker on a cluster without one: the GPU setting is named, not the CPUs
    with pytest.raises(ConfigError, match=r"runtime.gpus_per_worker=1: the cluster has 0 GPUs"):
        plan_pool(RuntimeConfig(gpus_per_worker=1), cluster_cpus=2, cluster_gpus=0)
    with pytest.raises(ConfigError, match=r"runtime.gpus_per_worker=2: .* at most 1"):
        plan_pool(RuntimeConfig(gpus_per_worker=2), cluster_cpus=2, cluster_gpus=1)


def test_task_costs_follow_sample_counts_and_each_clients_epochs():
    train, test, two = np.array([100, 10]), np.array([30, 3]), LocalWork(2)
    big = task_cost(ClientTask(0, {}, None, evaluate=True, train=True), train, test, two)
    small = task_cost(ClientTask(1, {}, None, evaluate=True, train=True), train, test, two)
    assert big == 1 + 3 * 2 * 100 + 30 and small == 1 + 3 * 2 * 10 + 3
    assert task_cost(ClientTask(0, {}, None, evaluate=True, train=False), train, test, two) == 31
    assert task_cost(GradientTask(0, num_samples=8), train, test, two) == 1 + 3 * 8
    # client.epochs_by_client=[1,3]: client 1 trains three epochs, and costs that much
    cycled = LocalWork(1, (1, 3))
    task = ClientTask(1, {}, None, evaluate=False, train=True)
    assert task_cost(task, train, test, cycled) == 1 + 3 * 3 * 10


# ------------------------------------------------------------------ transport (no Ray)


def test_tensors_travel_as_numpy_and_come_back_as_tensors():
    params = torch.arange(6, dtype=torch.float32)
    result = WorkerResult(clients=[], train_seconds=1.5)
    result.sums = {}
    task = ClientTask(3, payload={"mask": params > 2}, state={"p": [params]}, evaluate=1, train=0)
    wired = to_wire({"params": params, "task": task, "result": result, "n": 3})
    assert isinstance(wired["params"], WireTensor) and wired["n"] == 3
    assert wired["result"] is result  # nothing to convert: shared, not copied
    assert isinstance(wired["task"].payload["mask"], WireTensor)
    assert isinstance(task.payload["mask"], torch.Tensor)  # the original is untouched
    back = pickle.loads(pickle.dumps(wired, protocol=5))
    assert torch.equal(back["params"], params) and back["task"].client == 3
    assert torch.equal(back["task"].state["p"][0], params)
    assert back["task"].payload["mask"].dtype == torch.bool
    # copy=True gives owned tensors; copy=False may share the buffer it was unpickled from
    owned = pickle.loads(pickle.dumps(to_wire(params, copy=True), protocol=5))
    owned.add_(1)
    assert torch.equal(owned, params + 1)


# ------------------------------------------------------------------ gradient tasks (no Ray)


@pytest.fixture(scope="module")
def sim() -> Simulation:
    """2,000 digits, 10 clients, 60% sampled, 3 rounds; FedAvg plus a client state."""
    simulation = Simulation(small_config("join_ratio=0.6", "rounds=3"))
    algorithm = FedAvgWithMemory(simulation.algorithm.params, simulation.federation)
    simulation.algorithm = simulation.worker_spec.algorithm = algorithm
    return simulation


def test_gradient_task_is_the_mean_ce_gradient(sim):
    spec = dataclasses.replace(sim.worker_spec, num_threads=1)
    worker = ClientWorker(spec, sim.data)
    params = sim.initial_params
    out = worker.run(0, {"params": params}, [GradientTask(client=1, tag="full")]).outputs[0]

    module = build_model(spec.model.name, spec.model.args, **spec.model.kwargs)
    flat, _ = bind_flat_parameters(module)
    flat.copy_(params)
    x, y = sim.data.batch(sim.data.clients[1].train)
    loss = torch.nn.functional.cross_entropy(module(x), y)
    loss.backward()
    expected = torch.cat([p.grad.reshape(-1) for p in module.parameters()])
    assert out.tag == "full" and out.num_samples == len(sim.data.clients[1].train)
    assert torch.allclose(out.gradient, expected, atol=1e-6)
    assert out.loss == pytest.approx(loss.item(), rel=1e-5)


def test_minibatch_gradients_are_seeded(sim):
    spec = dataclasses.replace(sim.worker_spec, num_threads=1)
    worker = ClientWorker(spec, sim.data)
    broadcast = {"params": sim.initial_params}
    tasks = [
        GradientTask(client=2, num_samples=16, key=0),
        GradientTask(client=2, num_samples=16, key=0),
        GradientTask(client=2, num_samples=16, key=1),
    ]
    a, b, c = worker.run(5, broadcast, tasks).outputs
    assert a.num_samples == 16 and torch.equal(a.gradient, b.gradient)
    assert not torch.equal(a.gradient, c.gradient)


# ------------------------------------------------------------------ the pool (shared Ray)


def assert_same_run(got, want) -> None:
    """Identical metrics, aggregated parameters and client states."""
    assert got.summary == want.summary
    assert untimed(got.history) == untimed(want.history)
    assert torch.equal(got.state["params"], want.state["params"])
    assert got.client_store.clients() == want.client_store.clients()
    for client in want.client_store.clients():
        mine, theirs = got.client_store.get(client), want.client_store.get(client)
        assert mine["rounds"] == theirs["rounds"]
        assert torch.equal(mine["params"], theirs["params"])


@pytest.fixture(scope="module")
def pool(ray_pool, sim):
    """The session's lent worker actors (conftest ``ray_pool``: two at half a CPU each, still
    one torch thread each) for the whole module: a 1-worker pool fits next to them. They
    carry ``FedAvgWithMemory``'s module (tests/pool_classes.py) with the example package, so
    the runs keep them: no actor starts again."""
    lent = [actor._actor_id for actor in ray_pool["pool"].actors]
    executor = lent_ray_executor(sim, ray_pool)
    assert [actor._actor_id for actor in executor._actors] == lent
    yield executor
    executor.close()


@pytest.fixture(scope="module")
def pooled_run(pool, sim):
    return sim.run(pool)


@pytest.mark.slow
def test_ray_pool_matches_local_executor_and_repeats(sim, pool, pooled_run):
    assert [(i["threads"], i["niceness"]) for i in pool.worker_info] == [(1, 0), (1, 0)]
    assert all(i["dataset_shared"] for i in pool.worker_info)  # zero-copy object-store views
    assert_same_run(sim.run(pool), pooled_run)  # run after run: identical

    local_runtime = dataclasses.replace(sim.cfg.runtime, executor="local")
    local = sim.run(make_executor(local_runtime, sim.worker_spec, sim.data))
    one_worker = dataclasses.replace(
        sim.cfg.runtime, executor="ray", workers=1, cpus_per_worker=0.5
    )
    one = RayExecutor(one_worker, sim.worker_spec, sim.data)
    try:
        single = sim.run(one)
        assert one.run_round(0, {"params": sim.initial_params}, []) == [WorkerResult()]
    finally:
        one.close()
    assert wait_until_gone([one.worker_info[0]["pid"]], timeout=30.0) == []  # close() kills
    with pytest.raises(RuntimeError, match="closed"):
        one.run_round(0, {"params": sim.initial_params}, [GradientTask(client=0)])
    # 1 worker vs 2 workers vs in-process: same accuracy and aggregated parameters.
    for other in (local, single):
        acc = other.summary["final"]["acc_weighted"]
        assert abs(acc - pooled_run.summary["final"]["acc_weighted"]) <= 0.001
        assert (other.state["params"] - pooled_run.state["params"]).abs().max() <= 1e-5
    assert [h["num_trained"] for h in pooled_run.history] == [6, 6, 6, 0]

    # Gradient tasks through the pool equal the in-process worker's.
    extra = [GradientTask(client=c, num_samples=20, tag=c) for c in range(4)]
    broadcast = {"params": pooled_run.state["params"]}
    pooled = sorted(
        (o for w in pool.run_round(7, broadcast, extra) for o in w.outputs), key=lambda o: o.tag
    )
    spec = dataclasses.replace(sim.worker_spec, num_threads=1)
    direct = LocalExecutor(spec, sim.data).run_round(7, broadcast, extra)[0].outputs
    for got, want in zip(pooled, sorted(direct, key=lambda o: o.tag), strict=True):
        assert got.tag == want.tag and got.num_samples == want.num_samples
        assert torch.allclose(got.gradient, want.gradient, atol=1e-7)


@pytest.mark.slow
def test_worker_killed_mid_round_is_replaced_and_nothing_changes(sim, pool, pooled_run):
    """The dead worker's share re-runs from the pre-round state its tasks still carry, on a
    new actor in the dead one's slot (not on the surviving worker)."""
    import ray

    doomed = pool.worker_info[0]["pid"]
    doomed_id = pool._actors[0]._actor_id
    pool.crash_worker_on_round(0, round_idx=1)
    disturbed = sim.run(pool)
    assert wait_until_gone([doomed], timeout=30.0) == []  # the worker really died mid-round
    assert_same_run(disturbed, pooled_run)
    assert len(disturbed.client_store) >= 6
    replacement = pool._actors[0]
    assert replacement is not None and replacement._actor_id != doomed_id  # replaced
    info = ray.get(replacement.ready.remote(), timeout=60)
    assert info["pid"] != doomed and psutil.pid_exists(info["pid"])  # a new, live process


@pytest.mark.slow
def test_pool_that_cannot_be_placed_fails_clearly(sim, pool):
    """The lent pool holds 1 of the cluster's CPUs: a worker asking for all of them cannot
    start; no silent hang."""
    import ray

    every_cpu = ray.cluster_resources()["CPU"]
    runtime = dataclasses.replace(
        sim.cfg.runtime, executor="ray", workers=1, cpus_per_worker=every_cpu
    )
    with pytest.raises(RuntimeError, match=r"1 of 1 workers not started .* free now"):
        RayExecutor(runtime, sim.worker_spec, sim.data, startup_timeout_s=2)


def test_batches_get_one_layout_wherever_the_images_came_from():
    """Channels-last on the CPU: the same kernels (and numbers) in every process."""
    from fedsim.runtime.training import prepare_batch

    gray = torch.rand(5, 28, 28)
    loaded = gray[:, None]  # idx loader: strides (784, 784, 28, 1) or (784, 1, 28, 1)
    unpickled = pickle.loads(pickle.dumps(gray.numpy()[:, None].copy(), protocol=5))
    a, _ = prepare_batch((loaded, torch.zeros(5)), None)
    b, _ = prepare_batch((torch.from_numpy(unpickled), torch.zeros(5)), None)
    assert a.stride() == b.stride() == (784, 1, 28, 1)
    assert torch.equal(a, b) and torch.equal(a, loaded)
    color = torch.rand(2, 3, 8, 8)
    c, _ = prepare_batch((color, torch.zeros(2)), None)
    assert c.is_contiguous(memory_format=torch.channels_last) and torch.equal(c, color)
