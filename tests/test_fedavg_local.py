"""FedAvg and Local-only through the seam, against hand computations."""

import numpy as np
import torch
from helpers import client_info, federation, reduce_updates

from fedsim.algorithms.base import WeightedSum
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.local import LocalOnly

SIZES = [10, 30, 60]
PARAMS = [("w", (4,))]
FED = federation(PARAMS, SIZES)  # for client infos: client c holds SIZES[c] samples


def test_fedavg_aggregate_matches_hand_computation():
    algo = FedAvg(FedAvg.Params(), federation(PARAMS, SIZES))
    state = algo.init_state(torch.zeros(4))
    models = [
        torch.tensor([1.0, 2, 3, 4]),
        torch.tensor([0.0, 0, 0, 8]),
        torch.tensor([2.0, 1, 0, 1]),
    ]
    # two workers: clients {0, 2} and {1}; the reduction order must not matter
    updates = []
    for client in range(3):
        plan = algo.client_start(algo.broadcast(state), {}, None, client_info(FED, client))
        assert torch.equal(plan.train_params, state["params"])
        updates.append(algo.client_finish(plan, models[client], None, client_info(FED, client)))
    new = algo.aggregate(state, reduce_updates(updates, [0, 1, 0]), {}, algo.context(0))["params"]
    # hand: (10*[1,2,3,4] + 30*[0,0,0,8] + 60*[2,1,0,1]) / 100
    expected = torch.tensor([(10 + 120) / 100, (20 + 60) / 100, 30 / 100, (40 + 240 + 60) / 100])
    assert torch.allclose(new, expected, atol=1e-7)
    assert new.dtype == torch.float32


def test_fedavg_keeps_model_when_nobody_finished():
    algo = FedAvg(FedAvg.Params(), federation(PARAMS, SIZES))
    state = algo.init_state(torch.ones(4))
    assert torch.equal(algo.aggregate(state, {}, {}, algo.context(0))["params"], torch.ones(4))


def test_weighted_sum_is_order_independent_in_float64():
    rng = np.random.default_rng(0)
    values = [torch.tensor(rng.normal(size=1000), dtype=torch.float32) for _ in range(20)]
    weights = rng.integers(1, 500, size=20).tolist()
    forward, backward = WeightedSum(), WeightedSum()
    for w, v in zip(weights, values, strict=True):
        forward.add(w, v)
    for w, v in zip(reversed(weights), reversed(values), strict=True):
        backward.add(w, v)
    assert torch.equal(forward.mean(), backward.mean())


def test_local_only_trains_its_own_model_and_never_aggregates():
    algo = LocalOnly(LocalOnly.Params(), federation(PARAMS, SIZES))
    state = algo.init_state(torch.zeros(4))
    first = algo.client_start(algo.broadcast(state), {}, None, client_info(FED, 0))
    assert torch.equal(first.train_params, torch.zeros(4))  # round 0: the shared init
    trained = torch.tensor([1.0, 1, 1, 1])
    update = algo.client_finish(first, trained, None, client_info(FED, 0))
    assert update.sums == {} and torch.equal(update.state["params"], trained)
    later = algo.client_start(algo.broadcast(state), {}, update.state, client_info(FED, 0))
    assert torch.equal(later.train_params, trained)  # its own model, not the server's
    assert algo.aggregate(state, {}, {}, algo.context(0)) is state
