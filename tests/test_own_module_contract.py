"""Your model, unchanged: every registered algorithm gives the same result on a plain
LightningModule as on the built-in model it copies, on both executors.

The plain module (``examples/fedsim_plugins/plain_cnn.py``) is FedAvgCNN written as Lightning
users write it: no fedsim base class, its own SGD at its own ``lr`` (``model.args.lr``),
cross-entropy in ``training_step``. The algorithm's client terms (FedProx's and FedDyn's
loss terms, SCAFFOLD's and Ditto's gradient corrections, MOON's and FedRoD's objectives) are
fedsim's loop's work, so the per-round accuracy and loss equal the built-in's to the bit (the
arithmetic is the same: the same layers in the same order, the same SGD steps). An algorithm
that needs ``features(x)`` refuses the module without it in one line naming the method, and
gives the built-in's result with it. Each algorithm's plain run on the Ray pool equals its
local run (one pool, handed from run to run: ``RayExecutor.detach_pool``).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import assert_same, untimed
from test_algorithm_contract import BUILT_IN, REQUIRED, tiny_dataset

from fedsim.algorithms import ALGORITHMS
from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.runtime.executor import LocalExecutor
from fedsim.simulation import RunResult, Simulation, build_data

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PLAIN = "fedsim_plugins.plain_cnn:"
BASE = [
    "name=own-module",
    "seed=0",
    "rounds=2",
    "data.name=mnist-5k",
    "data.num_clients=4",
    "data.partition.name=dirichlet",
    "data.partition.alpha=0.5",
    "client.batch_size=16",
    "join_ratio=0.75",
    "runtime.executor=local",
    "runtime.device=cpu",
]
LR = 0.05


@pytest.fixture(autouse=True)
def examples_on_path(monkeypatch):
    """What ``PYTHONPATH=examples`` does for a user (the example package is not installed)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))


def model_keys(algorithm: str, kind: str) -> list[str]:
    """``builtin``: fedavg_cnn at client.lr; ``plain`` / ``features``: its plain copy (with
    ``features``) at its own lr; FedBN's model has BatchNorm either way."""
    bn = algorithm == "fedbn"
    if kind == "builtin":
        return [f"model.name={'fedavg_cnn_bn' if bn else 'fedavg_cnn'}", f"client.lr={LR}"]
    cls = "PlainCNNBN" if bn else ("PlainCNNWithFeatures" if kind == "features" else "PlainCNN")
    return [f"model.name={PLAIN}{cls}", f"model.args.lr={LR}"]


def config(algorithm: str, kind: str, *extra: str) -> Any:
    required = [k for k in REQUIRED.get(algorithm, []) if not k.startswith("model.name=")]
    keys = [*BASE, f"algorithm.name={algorithm}", *required, *model_keys(algorithm, kind)]
    return load_config(None, [*keys, *extra])


def plain_kind(algorithm: str) -> str:
    return "features" if "features" in ALGORITHMS[algorithm].model_needs else "plain"


def run(cfg: Any, pool: Any = None) -> tuple[RunResult, Any]:
    """The run on the local executor, or on the Ray pool ``pool`` (the pool handed back)."""
    torch.set_num_threads(1)
    simulation = Simulation(cfg, build_data(cfg, tiny_dataset()))
    if pool is None:
        simulation.worker_spec.num_threads = 1
        with LocalExecutor(simulation.worker_spec, simulation.data) as executor:
            return simulation.run(executor), None
    from fedsim.runtime.ray_executor import RayExecutor

    runtime = dataclasses.replace(cfg.runtime, executor="ray", workers=2, cpus_per_worker=0.5)
    executor = RayExecutor(runtime, simulation.worker_spec, simulation.data, pool=pool)
    try:
        return simulation.run(executor), executor.detach_pool()
    except BaseException:
        executor.close()
        raise


@functools.cache
def local_run(algorithm: str, kind: str) -> RunResult:
    return run(config(algorithm, kind))[0]


def final_params(result: RunResult) -> Any:
    return result.state.get("params") if isinstance(result.state, dict) else None


@pytest.mark.parametrize("algorithm", BUILT_IN)
def test_plain_module_equals_the_built_in_model(algorithm: str) -> None:
    if ALGORITHMS[algorithm].model_needs:  # refused without the method, in one line
        with pytest.raises(ConfigError, match=r"calls PlainCNN\.features\(x\), which it does not"):
            cfg = config(algorithm, "plain")
            Simulation(cfg, build_data(cfg, tiny_dataset()))
    builtin = local_run(algorithm, "builtin")
    plain = local_run(algorithm, plain_kind(algorithm))
    assert untimed(plain.history) == untimed(builtin.history)
    assert_same(final_params(plain), final_params(builtin), "params")


@pytest.fixture(scope="module")
def ray_pool(ray_cluster):
    """One 2-worker pool for every algorithm's Ray run (actors start once)."""
    from fedsim.config import RuntimeConfig
    from fedsim.runtime.pool_start import start_pool

    held = {"pool": start_pool(RuntimeConfig(executor="ray", workers=2, cpus_per_worker=0.5))}
    yield held
    held["pool"].close()


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", BUILT_IN)
def test_plain_module_on_the_ray_pool_equals_the_local_executor(algorithm, ray_pool) -> None:
    cfg = config(algorithm, plain_kind(algorithm))
    on_ray, ray_pool["pool"] = run(cfg, ray_pool["pool"])
    assert untimed(on_ray.history) == untimed(local_run(algorithm, plain_kind(algorithm)).history)


@pytest.mark.parametrize(
    ("algorithm", "off", "on"),
    [
        ("ditto", ["algorithm.mu=0"], ["algorithm.mu=10"]),
        ("fedprox", ["algorithm.mu=0.0001"], ["algorithm.mu=10"]),
        ("scaffold", ["algorithm.name=fedavg"], []),
    ],
)
def test_terms_act_on_the_plain_module(algorithm: str, off: list[str], on: list[str]) -> None:
    """Ditto's pull, FedProx's proximal term and SCAFFOLD's control variates change the
    result of a plain module (not FedAvg under another name)."""
    without = run(config(algorithm, "plain", *off))[0].history
    with_terms = run(config(algorithm, "plain", *on))[0].history
    assert without[-1]["loss"] != pytest.approx(with_terms[-1]["loss"], rel=1e-3)
