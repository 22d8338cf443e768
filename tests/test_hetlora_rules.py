"""HetLoRA's options by hand on hand-made adapters (no model): the tail penalty's value, the
sparsity weights per module (the reimplementation) or per client, and the scale a rank-r
client runs at (alpha / r, or the model's alpha / r_max). Real runs: ``test_hetlora.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsim.algorithm_params.hetlora import HetLoRAParams
from fedsim.algorithms.base import FederationInfo, WeightedSum
from fedsim.algorithms.hetlora import HetLoRA, TailPenalty
from lightning_modules.adapters import AdapterParts, LoraModule
from lightning_modules.flat_params import ParamEntry, ParamLayout

SCALE = "rank_scale.factor"


def two_modules(scale: bool = True) -> FederationInfo:
    """Modules p and q, each A (2 x 1) and B (1 x 2): max rank 2; the scale factor last."""
    entries, offset, modules = [], 0, []
    for m in ("p", "q"):
        a, b = f"{m}.lora_A.default.weight", f"{m}.lora_B.default.weight"
        entries += [ParamEntry(a, (2, 1), offset, 2), ParamEntry(b, (1, 2), offset + 2, 2)]
        offset += 4
        modules.append(LoraModule(m, a, b))
    if scale:
        entries.append(ParamEntry(SCALE, (1,), offset, 1))
    declared = AdapterParts("scaled", tuple(modules), scale=SCALE if scale else None)
    return FederationInfo(layout=ParamLayout(entries), num_clients=2, num_classes=1,
                          train_sizes=np.array([10, 30]), class_counts=np.ones((2, 1)),
                          head_names=[], block_names=[], block_parameters={},
                          adapters=declared)  # fmt: skip


def test_the_tail_penalty_by_hand():
    """lambda * sum_modules |A[t:r]|_F |B[:, t:r]|_F, at rank 3 with t = 1."""
    a = torch.tensor([[9.0, 9.0], [3.0, 4.0], [0.0, 0.0]])  # rows 1..2: |.| = 5
    b = torch.tensor([[9.0, 0.0, 6.0], [9.0, 0.0, 8.0]])  # columns 1..2: |.| = 10
    c = torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.0, 2.0]])  # rows 1..2: |.| = 2
    d = torch.tensor([[5.0, 0.0, 1.0]])  # columns 1..2: |.| = 1
    penalty = TailPenalty([("a", "b"), ("c", "d")], tail=1, rank=3, lam=0.01)
    value = penalty.loss({"a": a, "b": b, "c": c, "d": d})
    assert value.item() == pytest.approx(0.01 * (5 * 10 + 2 * 1))


@pytest.mark.parametrize("weights_per", ["layer", "client"])
def test_sparsity_weights_per_module_or_per_client(weights_per):
    """Two rank-2 clients: module p's update is |B A|_F = 1 on client 0 and 3 on client 1,
    module q's 2 and 0. Per layer each module is averaged with its own weights (q takes
    client 0's alone); per client both with s_k = 3 and 3."""
    fed = two_modules()
    algorithm = HetLoRA(HetLoRAParams(aggregation="sparsity", weights_per=weights_per,
                                      self_pruning=False), fed)  # fmt: skip
    models = {0: [1.0, 0.0, 1.0, 0.0, 2.0, 0.0, 1.0, 0.0],  # B A: [[1]] and [[2]]
              1: [3.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]}  # [[3]] and [[0]]
    server = torch.zeros(9)
    server[8] = 1.0
    sums: dict[str, WeightedSum] = {}
    for client, values in models.items():
        info = algorithm.client_info(client, 0)
        plan = algorithm.client_start({"params": server}, {}, None, info)
        update = algorithm.client_finish(plan, torch.tensor([*values, 7.0]), None, info)
        for key, (weight, value) in update.sums.items():
            sums.setdefault(key, WeightedSum()).add(weight, value)
    new = algorithm.aggregate({"params": server}, sums, {}, 0)["params"]
    p, q = torch.tensor(models[0]), torch.tensor(models[1])
    if weights_per == "layer":
        want_p = (1 * p[:4] + 3 * q[:4]) / 4
        want_q = p[4:8]  # client 1's q product is zero: weight 0
    else:
        want_p, want_q = (p[:4] + q[:4]) / 2, (p[4:8] + q[4:8]) / 2
    assert torch.allclose(new[:4], want_p) and torch.allclose(new[4:8], want_q)
    assert new[8] == 1.0  # the server's scale, never averaged (the clients' 7 never sent)


@pytest.mark.parametrize("scaling", ["client_rank", "max_rank"])
def test_a_rank_r_client_runs_at_alpha_over_r_or_the_models_scale(scaling):
    """The scale factor a rank-1 client trains with on a rank-2 model: r_max / r = 2 (its
    adapter at alpha / r, the reimplementation) or 1 (alpha / r_max); never uploaded or
    counted in bytes."""
    fed = two_modules()
    algorithm = HetLoRA(HetLoRAParams(client_ranks={0: 1}, scaling=scaling), fed)
    info = algorithm.client_info(0, 0)
    server = torch.ones(9)
    plan = algorithm.client_start({"params": server}, algorithm.client_payload({}, 0), None, info)
    assert plan.train_params[8] == (2.0 if scaling == "client_rank" else 1.0)
    assert plan.train_params[:8].tolist() == [1, 0, 1, 0, 1, 0, 1, 0]  # rank 1 of each
    assert algorithm.download_nbytes({"params": server}, {"rank": 1}, None) == 4 * 4
    update = algorithm.client_finish(plan, plan.train_params, None, info)
    assert sum(v.numel() for _, v in update.sums.values()) == 4


def test_client_rank_scaling_needs_the_models_scale_factor():
    from fedsim.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        HetLoRA(HetLoRAParams(), two_modules(scale=False))
    assert err.value.key == "algorithm.scaling" and "\n" not in str(err.value)
