"""The algorithm contract, for every algorithm in the registry (a new file is covered as is).

Each runs on a tiny real federation (mnist-5k, a fixed random 320 of its images, 4 Dirichlet
clients, 3 of them a round; the narrow FedAvgCNN: a contract, not the net's size) on the
local executor, with every state forced to disk: the
driver's client states (``runtime.state_memory_gb=0``) and any server-side store of the
algorithm's own (every ``algorithm.*memory_gb`` key set to 0). Checked:

- every training round reports ``bytes_down`` and ``bytes_up``;
- a run stopped after round 1 and resumed from its checkpoint, after the stopped run's stores
  were closed (their spill folders deleted), equals the uninterrupted run to the bit:
  metrics, server state and every client's state (a checkpoint holds contents, not paths);
- the checkpoint holds the algorithm, and the algorithm and its final server state survive a
  pickle round trip: the same broadcast, payloads and personalized models as the originals;
- ``personalized_params`` and ``figures`` work on the driver from the final state alone;
- the newcomer contract (``test_newcomer_contract``): a held-out client evaluated by the
  algorithm's own rule, the global model and after-training evaluation change no training.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import NARROW_CNN, assert_same, newcomers_unevaluated, untimed
from lora_fixtures import ADAPTER_ONLY

from fedsim.algorithm_params import example
from fedsim.algorithms import ALGORITHMS
from fedsim.checkpoint import Checkpoint, latest_checkpoint, load_checkpoint
from fedsim.config import load_config
from fedsim.data.datasets import ImageDataset
from fedsim.errors import ConfigError
from fedsim.figures import Figure
from fedsim.runtime.executor import LocalExecutor
from fedsim.simulation import RunResult, Simulation, build_data, cached_dataset
from fedsim.storage import ClientStateStore

ROUNDS = 2
SAMPLES = 320
CLIENTS = 4
BASE = [
    "name=contract",
    "seed=0",
    "data.name=mnist-5k",
    f"data.num_clients={CLIENTS}",
    "data.partition.name=dirichlet",
    "data.partition.alpha=0.5",
    "client.lr=0.05",
    "client.batch_size=16",
    "join_ratio=0.75",
    "runtime.executor=local",
    "runtime.device=cpu",
    "runtime.state_memory_gb=0",
    "checkpoint_every=1",
    *NARROW_CNN,
]
# fedsim's own algorithms (tests may register test-only ones in the same session), but those
# that need a LoRA adapter (their contract is on the tiny Llama: test_lora_methods_b_runs.py)
BUILT_IN = sorted(n for n, c in ALGORITHMS.items()
                  if c.__module__.startswith("fedsim.") and n not in ADAPTER_ONLY)  # fmt: skip
# what the contract's small runs add to an algorithm's own example (fedsim.algorithm_params:
# its declared smallest runnable example): settings that make its code paths run here
COVERAGE = {
    # two clusters on the contract's few clients, from a Dirichlet split
    "oracle": ["data.partition.base=dirichlet", "data.partition.clusters=2"],
    # splits from round 0 with thresholds every update passes, so the contract covers a split
    "fc": ["algorithm.split_after=0", "algorithm.eps1=1e9", "algorithm.eps2=1e-9"],
    "ifca": ["algorithm.clusters=2"],
    # its peers join each step by algorithm.participation; join_ratio would not act
    "spcacw": ["join_ratio=1.0"],
}
REQUIRED = {name: [*example(name), *COVERAGE.get(name, [])] for name in BUILT_IN}
# settings that only make a contract run cheaper, the code paths unchanged: FedBABU
# fine-tunes 10 epochs before every evaluation by default (ten rounds' training each time),
# SP-CACW estimates its curvature with 10 power iterations on 128 samples
CHEAPER = {
    "fedbabu": ["algorithm.finetune_epochs=1"],
    "spcacw": ["algorithm.lipschitz_samples=32", "algorithm.lipschitz_iterations=4"],
}


@functools.lru_cache(maxsize=1)
def tiny_dataset() -> ImageDataset:
    """A fixed random subset of mnist-5k (every class present)."""
    full = cached_dataset("mnist-5k", "data", True)
    keep = np.sort(np.random.default_rng(0).choice(len(full), SAMPLES, replace=False))
    return ImageDataset(full.name, full.images[keep], full.labels[keep], full.num_classes)


def config(name: str, rounds: int) -> Any:
    """The contract's config for algorithm ``name``: every memory budget 0 (all spilled)."""
    return load_config(None, [*BASE, *config_overrides(name, rounds)])


def run(
    name: str, rounds: int, run_dir: Path, resume: Checkpoint | None = None
) -> tuple[RunResult, Simulation]:
    cfg = config(name, rounds)
    simulation = Simulation(cfg, build_data(cfg, tiny_dataset()))
    simulation.worker_spec.num_threads = 1
    with LocalExecutor(simulation.worker_spec, simulation.data) as executor:
        result = simulation.run(executor, run_dir=run_dir, resume=resume)
    return result, simulation


def stores(value: Any) -> list[ClientStateStore]:
    """Every client state store inside a (server) state."""
    if isinstance(value, ClientStateStore):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in stores(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in stores(v)]
    return []


@pytest.mark.parametrize("name", BUILT_IN)
def test_algorithm_contract(name: str, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    straight, simulation = run(name, ROUNDS, tmp_path / "straight")
    algorithm = simulation.algorithm
    assert straight.client_store.num_spilled == len(straight.client_store)  # all on disk
    for server_store in stores(straight.state):
        assert server_store.num_spilled == len(server_store) > 0

    # communication is reported every training round
    for summary in straight.history[:ROUNDS]:
        for key in ("bytes_down", "bytes_up"):
            assert isinstance(summary[key], int) and summary[key] >= 0, (key, summary)
    assert "bytes_down" not in straight.history[ROUNDS]  # the evaluation-only round

    # stop after round 1, delete every spill folder, resume from the checkpoint
    stopped, _ = run(name, 1, tmp_path / "resumed")
    for store in [stopped.client_store, *stores(stopped.state)]:
        store.close()
    checkpoint = load_checkpoint(latest_checkpoint(tmp_path / "resumed"))
    assert checkpoint.rounds_trained == 1 and type(checkpoint.algorithm) is type(algorithm)
    resumed, _ = run(name, ROUNDS, tmp_path / "resumed", resume=checkpoint)
    assert untimed(resumed.history) == untimed(straight.history)
    assert_same(resumed.state, straight.state)
    assert_same(resumed.client_store, straight.client_store, "client states")

    # the algorithm and its server state survive pickling
    copy = pickle.loads(pickle.dumps(algorithm))
    state = pickle.loads(pickle.dumps(straight.state))
    assert_same(state, straight.state)
    assert_same(copy.broadcast(state), algorithm.broadcast(straight.state), "broadcast")
    total = algorithm.federation.layout.total
    for client in range(CLIENTS):
        assert_same(
            copy.client_payload(state, client),
            algorithm.client_payload(straight.state, client),
            f"payload[{client}]",
        )
        own = straight.client_store.get(client)
        info = copy.client_info(client, ROUNDS)
        personal = copy.personalized_params(state, own, info)
        assert personal.shape == (total,) and personal.dtype == torch.float32
        assert_same(personal, algorithm.personalized_params(straight.state, own, info))

    # figures from the final state alone: plain specs
    for figure in copy.figures(state, straight.client_store, ROUNDS):
        assert isinstance(figure, Figure) and figure.filename.endswith(".png")
        for panel in figure.panels:
            assert panel.values.ndim == 2 and np.isfinite(panel.values).all()
    for store in [straight.client_store, resumed.client_store, *stores(state)]:
        store.close()


def newcomer_run(name: str, *eval_options: str, evaluate_newcomers: bool = True) -> RunResult:
    """The contract's run of ``name`` (one round) with one held-out client and
    ``eval_options``; ``evaluate_newcomers=False``: the loop never plans the held-out
    client's evaluation (the control)."""
    cfg = load_config(None, [*BASE, *config_overrides(name, 1), "checkpoint_every=0",
                             "runtime.state_memory_gb=null", "eval.holdout_clients=1",
                             *eval_options])  # fmt: skip
    simulation = Simulation(cfg, build_data(cfg, tiny_dataset()))
    simulation.worker_spec.num_threads = 1
    members = simulation.data.num_clients
    members = members if not evaluate_newcomers else len(simulation.data.everyone)
    with LocalExecutor(simulation.worker_spec, simulation.data) as executor:
        with newcomers_unevaluated(members):
            return simulation.run(executor)


def config_overrides(name: str, rounds: int) -> list[str]:
    params = ALGORITHMS[name].Params
    spill = [f"algorithm.{f.name}=0" for f in dataclasses.fields(params) if "memory_gb" in f.name]
    required = [*REQUIRED.get(name, []), *CHEAPER.get(name, [])]
    return [f"algorithm.name={name}", f"rounds={rounds}", *required, *spill]


@pytest.mark.parametrize("name", BUILT_IN)
def test_newcomer_contract(name: str) -> None:
    """Every algorithm declares its newcomer rule in its own class; with a held-out client
    evaluated by it, the global model evaluated beside the personal one (where there is one)
    and clients judged after their training (local rounds), training is bit-identical to the
    same run that evaluates none of that, and the new metrics are finite."""
    torch.set_num_threads(1)
    cls = ALGORITHMS[name]
    assert "newcomer" in cls.__dict__, f"{cls.__name__} declares no newcomer rule of its own"
    rule = cls.newcomer
    assert rule.rule and rule.source, rule
    if rule.refused:
        with pytest.raises(ConfigError, match="eval.holdout_clients"):
            newcomer_run(name)
        return
    options = ["eval.model=both"] if cls.has_global_model else []
    if not cls.trains_by_exchange:
        options.append("eval.when=after_training")
    judged = newcomer_run(name, *options)
    control = newcomer_run(name, evaluate_newcomers=False)
    for a, b in zip(untimed(judged.history), untimed(control.history), strict=True):
        for key in ("train_loss", "num_trained", "bytes_down", "bytes_up"):
            assert a.get(key) == b.get(key), (key, a, b)
        assert np.isfinite(a["unseen/acc_weighted"]) and np.isfinite(a["participation_gap"])
        assert ("global/acc_weighted" in a) == cls.has_global_model
    assert_same(judged.state, control.state)
    assert_same(judged.client_store, control.client_store, "client states")
    assert CLIENTS - 1 not in judged.client_store.clients()  # the held-out client keeps nothing
