"""FedSA-LoRA, FFA-LoRA and FedEx-LoRA (issue 54): each aggregation rule against a hand
computation on hand-made adapters (two modules, two clients of 1 and 3 samples, a head), its
bytes, and the one-line refusal of a model without LoRA. Their real runs on the tiny Llama,
the papers' claims and the contract on adapters: ``test_lora_methods_b_runs.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from helpers import client_info, federation, run_round
from lora_fixtures import ADAPTER_ONLY

from fedsim.algorithms import ALGORITHMS
from fedsim.errors import ConfigError
from lightning_modules.adapters import AdapterParts, LoraModule

METHODS = ADAPTER_ONLY  # every method that declares an adapter (ADAPTER)
A, B, R = "lora_A", "lora_B", "lora_residual"

# ------------------------------------------------------------------ hand computations


HEAD = "head.weight"  # a trained entry outside the adapter (a classifier's head)


def lora_federation(residual: bool = False, sizes: tuple[int, ...] = (1, 3)):
    """Two adapted modules, q (out 4) and v (out 2), rank 2 over 3 inputs (+ residuals), and
    a head of 2 entries."""
    params, modules = [], []
    for module, out in (("m.q", 4), ("m.v", 2)):
        a, b = f"{module}.{A}.default.weight", f"{module}.{B}.default.weight"
        params += [(a, (2, 3)), (b, (out, 2))]
        if residual:
            params.append((f"{module}.{R}", (out, 3)))
        modules.append(LoraModule(module, a, b, f"{module}.{R}" if residual else None))
    declared = AdapterParts("residual" if residual else "lora", tuple(modules))
    return federation([*params, (HEAD, (2,))], sizes=list(sizes), adapters=declared)


def head_is_averaged(new: dict[str, Any], models: list[torch.Tensor], fed: Any) -> bool:
    head = [fed.layout.view(m, HEAD) for m in models]
    return torch.equal(fed.layout.view(new["params"], HEAD), weighted(head, (1, 3)).float())


def part(flat: torch.Tensor, fed: Any, module: str, what: str) -> torch.Tensor:
    """The matrix ``what`` (A, B or R) of ``module`` in ``flat``, as a new tensor."""
    name = f"{module}.{what}" if what == R else f"{module}.{what}.default.weight"
    return fed.layout.view(flat, name).clone()


def weighted(values: list[torch.Tensor], weights: tuple[int, ...]) -> torch.Tensor:
    return sum(w * v.double() for w, v in zip(weights, values, strict=True)) / sum(weights)


def trained_models(total: int, start: torch.Tensor, fed: Any) -> list[torch.Tensor]:
    """Two clients' models after 'training': A and B moved, residuals as received."""
    generator = torch.Generator().manual_seed(1)
    models = []
    for _ in range(2):
        model = torch.randn(total, generator=generator)
        for name in [e.name for e in fed.layout.entries if e.name.endswith(R)]:
            model[fed.layout.slice_of(name)] = start[fed.layout.slice_of(name)]
        models.append(model)
    return models


@pytest.mark.parametrize("local_head", [True, False])
def test_fedsa_lora_averages_a_and_keeps_each_clients_b(local_head):
    """A averaged (n_i), B kept; the head kept with B (official: local_param [lora_B,
    classifier]) or, with local_head false, averaged as A is."""
    fed = lora_federation()
    cls = ALGORITHMS["fedsa_lora"]
    algo = cls(cls.Params(local_head=local_head), fed)
    initial = torch.randn(fed.layout.total, generator=torch.Generator().manual_seed(0))
    state = algo.init_state(initial)
    models = trained_models(fed.layout.total, initial, fed)
    new, updates = run_round(algo, state, models)
    for module in ("m.q", "m.v"):
        want = weighted([part(m, fed, module, A) for m in models], (1, 3)).float()
        assert torch.equal(part(new["params"], fed, module, A), want)
        assert torch.equal(part(new["params"], fed, module, B), part(initial, fed, module, B))
    # the next round: the averaged A under the client's own B
    info = client_info(fed, 1, round_idx=1)
    plan = algo.client_start(algo.broadcast(new), {}, updates[1].state, info)
    for module in ("m.q", "m.v"):
        assert torch.equal(part(plan.train_params, fed, module, A),
                           part(new["params"], fed, module, A))  # fmt: skip
        assert torch.equal(part(plan.train_params, fed, module, B), part(models[1], fed, module, B))
    head = fed.layout.slice_of(HEAD)
    if local_head:  # the server's head stays the initial one; the client trains from its own
        assert torch.equal(new["params"][head], initial[head])
        assert torch.equal(plan.train_params[head], models[1][head])
    else:
        assert head_is_averaged(new, models, fed)
    head_size = 0 if local_head else 2
    a_bytes = 4 * (2 * 3 + 2 * 3 + head_size)  # A (and the head)
    assert algo.upload_nbytes(updates[0]) == a_bytes
    assert updates[0].state["personal"].numel() == 4 * 2 + 2 * 2 + 2 - head_size  # B (+ head)
    broadcast = algo.broadcast(new)
    assert algo.download_nbytes(broadcast, {}, None) == 4 * fed.layout.total  # first round
    assert algo.download_nbytes(broadcast, {}, updates[0].state) == a_bytes


def test_ffa_lora_freezes_a_and_averages_b_exactly():
    fed = lora_federation()
    cls = ALGORITHMS["ffa_lora"]
    algo = cls(cls.Params(), fed)
    initial = torch.randn(fed.layout.total, generator=torch.Generator().manual_seed(0))
    state = algo.init_state(initial)
    plan = algo.client_start(algo.broadcast(state), {}, None, client_info(fed, 0))
    assert sorted(plan.frozen) == sorted(e.name for e in fed.layout.entries if f".{A}." in e.name)
    models = trained_models(fed.layout.total, initial, fed)
    for model in models:  # the worker keeps frozen entries as they were
        for name in plan.frozen:
            model[fed.layout.slice_of(name)] = initial[fed.layout.slice_of(name)]
    new, updates = run_round(algo, state, models)
    for module in ("m.q", "m.v"):
        a = part(initial, fed, module, A)
        b_mean = weighted([part(m, fed, module, B) for m in models], (1, 3)).float()
        assert torch.equal(part(new["params"], fed, module, A), a)
        assert torch.equal(part(new["params"], fed, module, B), b_mean)
        mean_products = weighted([part(m, fed, module, B) @ a for m in models], (1, 3))
        assert torch.allclose((b_mean @ a).double(), mean_products, atol=1e-6)
    assert head_is_averaged(new, models, fed)
    b_bytes = 4 * (4 * 2 + 2 * 2 + 2)  # B and the head
    assert algo.upload_nbytes(updates[0]) == b_bytes
    assert algo.download_nbytes(algo.broadcast(new), {}, None) == b_bytes


def test_fedex_lora_folds_the_residual_of_the_products():
    fed = lora_federation(residual=True)
    cls = ALGORITHMS["fedex_lora"]
    algo = cls(cls.Params(), fed)
    initial = torch.randn(fed.layout.total, generator=torch.Generator().manual_seed(0))
    state = algo.init_state(initial)  # residuals already nonzero: a later round
    plan = algo.client_start(algo.broadcast(state), {}, None, client_info(fed, 0))
    assert sorted(plan.frozen) == ["m.q.lora_residual", "m.v.lora_residual"]
    models = trained_models(fed.layout.total, initial, fed)
    new, updates = run_round(algo, state, models)
    for module in ("m.q", "m.v"):
        a_mean = weighted([part(m, fed, module, A) for m in models], (1, 3)).float()
        b_mean = weighted([part(m, fed, module, B) for m in models], (1, 3)).float()
        products = weighted([part(m, fed, module, B) @ part(m, fed, module, A) for m in models],
                            (1, 3))  # fmt: skip
        gap = products - b_mean.double() @ a_mean.double()  # float64, as the server computes
        residual = part(initial, fed, module, R).double() + gap
        got = new["params"]
        assert torch.equal(part(got, fed, module, A), a_mean)
        assert torch.equal(part(got, fed, module, B), b_mean)
        assert torch.equal(part(got, fed, module, R), residual.float())
        # the aggregated update is the mean of the clients' updates R + B_i A_i
        updates_mean = weighted([part(initial, fed, module, R) + part(m, fed, module, B)
                                 @ part(m, fed, module, A) for m in models], (1, 3))  # fmt: skip
        folded = part(got, fed, module, R) + part(got, fed, module, B) @ part(got, fed, module, A)
        assert torch.allclose(folded.double(), updates_mean, atol=1e-5)
        assert not torch.allclose(b_mean @ a_mean + part(initial, fed, module, R),
                                  updates_mean.float(), atol=1e-2)  # FedAvg's is not  # fmt: skip
    assert head_is_averaged(new, models, fed)
    adapter = 4 * (2 * 3 * 2 + 4 * 2 + 2 * 2 + 2)
    assert algo.upload_nbytes(updates[0]) == adapter  # A, B and the head, not the products
    assert algo.download_nbytes(algo.broadcast(new), {}, None) == 4 * fed.layout.total


@pytest.mark.parametrize("name", METHODS)
def test_a_model_without_lora_is_refused_in_one_line(name):
    fed = federation([("w", (3, 2)), ("b", (2,))], sizes=[1, 2])
    cls = ALGORITHMS[name]
    with pytest.raises(ConfigError, match="model.name=causal_lm") as err:
        cls(cls.Params(), fed)
    assert err.value.key == "algorithm.name" and "\n" not in str(err.value)
    if name == "fedex_lora":  # a model that declares no residual (the variant it asks for)
        with pytest.raises(ConfigError, match="declares none") as err:
            cls(cls.Params(), lora_federation(residual=False))
        assert err.value.key == "model.name" and "\n" not in str(err.value)
