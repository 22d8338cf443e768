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
from helpers import assert_same, lent_ray_executor, untimed
from test_algorithm_contract import BUILT_IN, CHEAPER, REQUIRED, tiny_dataset

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
    required += CHEAPER.get(algorithm, [])
    keys = [*BASE, f"algorithm.name={algorithm}", *required, *model_keys(algorithm, kind)]
    return load_config(None, [*keys, *extra])


def plain_kind(algorithm: str) -> str:
    return "features" if "features" in ALGORITHMS[algorithm].model_needs else "plain"


def run(cfg: Any, held: dict[str, Any] | None = None) -> RunResult:
    """The run on the local executor, or on the worker actors the ``ray_pool`` holder
    ``held`` lends (handed back at the end: ``helpers.lent_ray_executor``)."""
    torch.set_num_threads(1)
    simulation = Simulation(cfg, build_data(cfg, tiny_dataset()))
    if held is None:
        simulation.worker_spec.num_threads = 1
        executor = LocalExecutor(simulation.worker_spec, simulation.data)
    else:
        executor = lent_ray_executor(simulation, held)
    with executor:
        return simulation.run(executor)


@functools.cache
def local_run(algorithm: str, kind: str) -> RunResult:
    return run(config(algorithm, kind))


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


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", BUILT_IN)
def test_plain_module_on_the_ray_pool_equals_the_local_executor(algorithm, ray_pool) -> None:
    cfg = config(algorithm, plain_kind(algorithm))
    on_ray = run(cfg, ray_pool)
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
    without = run(config(algorithm, "plain", *off)).history
    with_terms = run(config(algorithm, "plain", *on)).history
    assert without[-1]["loss"] != pytest.approx(with_terms[-1]["loss"], rel=1e-3)


# --- bytes: what each algorithm's protocol sends, counted by hand (units of the model) ---
def _full(u, new):
    return u.P, u.P


PROTOCOL_BYTES = {  # (down, up) of one trained client; ``new``: its first round
    **dict.fromkeys(
        [
            "fedavg",
            "fedavgm",
            "fedprox",
            "fedvg",
            "moon",
            "apfl",
            "pfedme",
            "perfedavg",
            "ditto",
            "fedamp",
            "oracle",
            "fc",
            "feddyn",
        ],
        _full,
    ),  # fmt: skip  (FedDyn: its drift is derived on the server; Oracle, FC: one cluster's model)
    "fednova": lambda u, new: (u.P, u.P + 4),  # + its normalizing step count (float32)
    "feddisco": lambda u, new: (u.P, u.P + 8 * u.classes),  # + its class counts (int64)
    "fedbabu": lambda u, new: (u.P, u.P - u.H),  # keeps nothing: the frozen head comes along
    "scaffold": lambda u, new: (2 * u.P, 2 * u.P),  # model + c; update + c_i's change
    "ifca": lambda u, new: (2 * u.P, u.P),  # both cluster models (algorithm.clusters=2)
    "fedper": lambda u, new: (u.P if new else u.P - u.H, u.P - u.H),  # base only, once held
    "fedrep": lambda u, new: (u.P if new else u.P - u.H, u.P - u.H),
    "lgfedavg": lambda u, new: (u.P if new else u.H, u.H),  # the shared top only
    "fedbn": lambda u, new: (u.P if new else u.P - u.BN, u.P - u.BN),  # all but BatchNorm
    "fedrod": lambda u, new: (u.P + (u.H if new else 0), u.P),  # + the initial head, once
    "local": lambda u, new: (u.P if new else 0, 0),  # the initial model, once
    "cwfedavg": lambda u, new: (u.P + u.classes * u.H + u.r, u.P + 4 * u.classes),
}
# FedFomo's later rounds depend on how many peer models each client receives (its own tests);
# SP-CACW trains by exchange and counts its gradient pairs (tests/test_spcacw.py)
FIRST_ROUND_ONLY, OWN_ACCOUNTING = {"fedfomo": _full}, {"spcacw"}


@dataclasses.dataclass
class Units:
    P: int  # the whole model, bytes
    H: int  # the output layer
    BN: int  # BatchNorm parameters and statistics
    classes: int
    r: int  # cwFedAvg's initial class weights


# what decides a client's bytes: an algorithm that overrides none of these sends what the
# algorithm it subclasses sends (FedAvg-FT: FedAvg's), so it needs no row of its own
BYTE_METHODS = ("broadcast", "client_payload", "download_nbytes", "upload_nbytes",
                "model_upload", "client_finish")  # fmt: skip


def inherited_rule(algorithm: str) -> Any:
    """The row of the nearest registered base class whose bytes methods it keeps."""
    cls = ALGORITHMS[algorithm]
    for base in cls.__mro__[1:]:
        name = getattr(base, "name", None)
        if name in PROTOCOL_BYTES and all(
            getattr(cls, m) is getattr(base, m) for m in BYTE_METHODS
        ):
            return PROTOCOL_BYTES[name]
    return None


@pytest.mark.parametrize("algorithm", BUILT_IN)
def test_bytes_are_what_the_protocol_sends(algorithm: str) -> None:
    rule = PROTOCOL_BYTES.get(algorithm) or inherited_rule(algorithm)
    rule = rule or FIRST_ROUND_ONLY.get(algorithm)
    assert rule is not None or algorithm in OWN_ACCOUNTING, (
        f"say what {algorithm} sends per client in PROTOCOL_BYTES"
    )
    if algorithm in OWN_ACCOUNTING:
        pytest.skip(f"{algorithm} counts its own exchange")
    cfg = config(algorithm, "builtin")
    simulation = Simulation(cfg, build_data(cfg, tiny_dataset()))
    fed = simulation.federation
    numel = {e.name: e.numel for e in fed.layout.entries}
    result = local_run(algorithm, "builtin")
    r = result.state.get("initial_r") if isinstance(result.state, dict) else None
    units = Units(
        P=4 * fed.layout.total,
        H=4 * sum(numel[n] for n in fed.head_names),
        BN=4 * sum(numel[n] for n in fed.batchnorm_names),
        classes=fed.num_classes,
        r=0 if r is None else r.numel() * r.element_size(),
    )
    rounds = 1 if algorithm in FIRST_ROUND_ONLY else 2
    seen: set[int] = set()
    for round_idx in range(rounds):
        cohort = simulation.sample_cohort(round_idx)
        expected = [rule(units, c not in seen) for c in cohort]
        summary = result.history[round_idx]
        assert summary["bytes_down"] == sum(d for d, _ in expected), (round_idx, summary)
        assert summary["bytes_up"] == sum(u for _, u in expected), (round_idx, summary)
        seen.update(cohort)
