"""FedSA-LoRA, FFA-LoRA and FedEx-LoRA (issue 54) on the tiny random Llama of
``lora_fixtures.py``: what each paper claims, the residual module FedEx-LoRA needs, and the
algorithm contract on LoRA adapters (resume to the bit, bytes by hand, the Ray pool equals the
local executor, a held-out client served without changing any training), which the MNIST
contract's CNN cannot hold. Hand computations: ``test_lora_methods_b.py``.

The clients are synthetic: each one's text repeats its own letter pattern ("abcd", "dcba",
...), so after the same letter each expects another and one global adapter cannot fit them
all.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import assert_same, lent_ray_executor, newcomers_unevaluated, untimed
from lora_fixtures import (
    ADAPTER_ONLY,
    HEAD_DIM,
    HIDDEN,
    KV_HEADS,
    LAYERS,
    lora_params,
)
from test_lora_methods_b import A, B, R

from fedsim.algorithms import ALGORITHMS
from fedsim.checkpoint import latest_checkpoint, load_checkpoint
from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.runtime.executor import LocalExecutor
from fedsim.simulation import RunResult, Simulation, build_data

pytestmark = pytest.mark.xdist_group("lora")

RANK = 4
PATTERNS = ("abcd", "dcba", "acbd", "bdac")  # one client each; the fourth is held out


@pytest.fixture(scope="module")
def texts(tiny: str) -> Any:
    """One client per pattern: ~30 windows of 16 tokens of that pattern, repeated."""
    from fedsim.data.lm_text import tokenize_clients
    from fedsim.pretrained import load_tokenizer

    tokenizer = load_tokenizer("data.tokenizer", tiny)
    documents = [({"role": p}, [" ".join([p * 3] * 40)]) for p in PATTERNS]
    return tokenize_clients("patterns", documents, tokenizer, tiny, 16, True)


def config(tiny: str, algorithm: str, *overrides: str) -> Any:
    """The same model keys for every method: the variant it needs is its declaration."""
    return load_config(None, [
        "seed=0", "runtime.executor=local", "runtime.device=cpu", "data.name=shakespeare-lm",
        "data.num_clients=3", "data.min_samples=2", "model.name=causal_lm",
        f"model.args={{source: {tiny}, rank: {RANK}}}", "rounds=2",
        "client.batch_size=8", "client.optimizer=adam", "client.lr=0.02", "join_ratio=1.0",
        f"algorithm.name={algorithm}", *overrides,
    ])  # fmt: skip


def simulate(cfg: Any, texts: Any, run_dir: Path | None = None, resume: Any = None,
             held: dict[str, Any] | None = None) -> RunResult:  # fmt: skip
    """``cfg`` on ``texts`` (local executor, or the lent Ray pool ``held``)."""
    torch.set_num_threads(1)
    simulation = Simulation(cfg, build_data(cfg, texts))
    if held is None:
        simulation.worker_spec.num_threads = 1
        executor = LocalExecutor(simulation.worker_spec, simulation.data)
    else:
        executor = lent_ray_executor(simulation, held)
    with executor:
        return simulation.run(executor, run_dir=run_dir, resume=resume)


def record_training(monkeypatch: pytest.MonkeyPatch, name: str) -> dict[tuple[int, int], Any]:
    """(round, client) -> (the model it trained from, the model it trained to, n_i), for
    every client ``name`` finishes in this process."""
    seen: dict[tuple[int, int], Any] = {}
    cls = ALGORITHMS[name]
    finish = cls.client_finish

    def recording(self, plan, trained, state, client):
        seen[client.round, client.client] = (plan.train_params.clone(), trained.clone(),
                                             client.num_train)  # fmt: skip
        return finish(self, plan, trained, state, client)

    monkeypatch.setattr(cls, "client_finish", recording)
    return seen


def modules_of(layout: Any) -> list[tuple[str, str, str, str]]:
    """(A, B, residual, module) names per adapted module of a real layout."""
    names = [e.name for e in layout.entries if f".{A}." in e.name]
    return [(a, a.replace(f".{A}.", f".{B}."), a.split(f".{A}.")[0] + f".{R}",
             a.split(f".{A}.")[0]) for a in names]  # fmt: skip


def product_error(server: torch.Tensor, clients: list[Any], layout: Any) -> float:
    """max over modules of |R' + B'A' - mean_i(R_i + B_i A_i)| / |mean_i(...)|: how far the
    aggregated adapter's update is from the mean of the clients' (R: 0 without residuals)."""
    worst = 0.0
    total = sum(n for _, _, n in clients)
    for a, b, r, _ in modules_of(layout):
        def update(flat: torch.Tensor, start: torch.Tensor, a=a, b=b, r=r) -> torch.Tensor:
            base = layout.view(start, r).double() if r in layout.by_name else 0
            return base + layout.view(flat, b).double() @ layout.view(flat, a).double()

        mean = sum(n * update(trained, start) for start, trained, n in clients) / total
        got = update(server, server)
        worst = max(worst, float((got - mean).norm() / mean.norm()))
    return worst


def test_fedsa_lora_beats_fedavg_on_heterogeneous_clients(tiny, texts):
    """A personal B per client fits its own pattern; one averaged adapter cannot."""
    finals = {}
    for name in ("fedavg", "fedsa_lora"):
        finals[name] = simulate(config(tiny, name, "rounds=5"), texts).history[-1]
    sa, avg = finals["fedsa_lora"], finals["fedavg"]
    assert sa["acc_weighted"] > avg["acc_weighted"] + 0.15, (sa, avg)  # 0.59 vs 0.27
    assert sa["loss"] < avg["loss"] - 0.03, (sa, avg)  # 5.36 vs 5.47


@pytest.fixture(scope="module")
def fedavg_error(tiny: str, texts: Any) -> float:
    """FedAvg's product error after its second round on the same clients (0.23 measured)."""
    with pytest.MonkeyPatch.context() as patch:
        seen = record_training(patch, "fedavg")
        result = simulate(config(tiny, "fedavg"), texts)
    last = [v for (round_idx, _), v in seen.items() if round_idx == 1]
    return product_error(result.state["params"], last, result_layout(tiny))


def test_ffa_lora_keeps_a_to_the_bit_and_aggregates_exactly(tiny, texts, monkeypatch,
                                                            fedavg_error):  # fmt: skip
    seen = record_training(monkeypatch, "ffa_lora")
    result = simulate(config(tiny, "ffa_lora"), texts)
    layout = result_layout(tiny)
    a_names = [a for a, _, _, _ in modules_of(layout)]
    initial = seen[0, 0][0]
    for _, trained, _ in seen.values():  # every client, both rounds
        for a in a_names:
            assert torch.equal(layout.view(trained, a), layout.view(initial, a)), a
    for a in a_names:
        assert torch.equal(layout.view(result.state["params"], a), layout.view(initial, a))
    assert not torch.equal(result.state["params"], initial)  # B trained
    last = [v for (round_idx, _), v in seen.items() if round_idx == 1]
    assert product_error(result.state["params"], last, layout) < 1e-5  # 2.7e-8 measured
    assert fedavg_error > 1e-3


def test_fedex_lora_aggregate_is_the_mean_of_the_clients_updates(tiny, texts, monkeypatch,
                                                                 fedavg_error):  # fmt: skip
    """R' + B'A' = mean_i(R + B_i A_i) to float precision, in the round after the first fold."""
    seen = record_training(monkeypatch, "fedex_lora")
    result = simulate(config(tiny, "fedex_lora"), texts)
    layout = result_layout(tiny, residual=True)
    last = [v for (round_idx, _), v in seen.items() if round_idx == 1]
    residuals = [r for _, _, r, _ in modules_of(layout)]
    assert any(layout.view(last[0][0], r).abs().max() > 0 for r in residuals)  # folded in round 0
    assert product_error(result.state["params"], last, layout) < 1e-5  # 3.0e-8 measured
    assert fedavg_error > 1e-3
    for start, trained, _ in last:  # the residual never trains
        for r in residuals:
            assert torch.equal(layout.view(trained, r), layout.view(start, r))


def result_layout(tiny: str, residual: bool = False) -> Any:
    from lightning_modules.causal_lm import CausalLM
    from lightning_modules.flat_params import ParamLayout

    variant = "residual" if residual else None
    return ParamLayout.from_module(CausalLM(source=tiny, rank=RANK, adapter_variant=variant))
def test_a_residual_adds_its_product_as_peft_scales_it_and_never_trains(tiny):
    """R = B A in a module whose adapter is zero gives the output of adapter (A, B) with R = 0;
    R is in the flat vector but gets no gradient, and the shared base stays as it is."""
    from lightning_modules.causal_lm import CausalLM
    from lightning_modules.flat_params import ParamLayout

    x = torch.tensor([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, -1, -1]])
    y = torch.tensor([[2, 3, 4, 5, 6, 7], [8, 9, 10, -100, -100, -100]])
    plain, adapted, folded = (CausalLM(source=tiny, rank=RANK, adapter_variant="residual")
                              for _ in range(3))  # fmt: skip
    layout = ParamLayout.from_module(folded)
    out = KV_HEADS * HEAD_DIM
    assert layout.total == lora_params(RANK) + LAYERS * HIDDEN * (HIDDEN + out)
    a_name, b_name, r_name, _ = modules_of(layout)[0]
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(layout.by_name[a_name].shape, generator=generator)
    b = torch.randn(layout.by_name[b_name].shape, generator=generator)
    with torch.no_grad():
        for module in (plain, adapted, folded):  # the same adapter everywhere else: zero B
            params = dict(module.named_parameters())
            for e in layout.entries:
                params[e.name].zero_()
        dict(adapted.named_parameters())[a_name].copy_(a)
        dict(adapted.named_parameters())[b_name].copy_(b)
        dict(folded.named_parameters())[r_name].copy_(b @ a)
        outputs = [module.eval()(x) for module in (plain, adapted, folded)]
    assert not torch.allclose(outputs[0], outputs[1], atol=1e-3)  # the adapter acts
    assert torch.allclose(outputs[1], outputs[2], atol=1e-5)  # and R acts as B A does
    base = CausalLM(source=tiny, rank=RANK)  # the base every module shares, unchanged
    weights = {n.removesuffix(".base_layer.weight"): p for n, p in base.named_parameters()}
    q = r_name.removesuffix(".lora_residual")
    shared = dict(folded.named_parameters())[f"{q}.base_layer.weight"]
    assert shared.data_ptr() == weights[q].data_ptr() and not shared.requires_grad
    folded.train().training_step((x, y)).backward()
    grads = dict(folded.named_parameters())
    assert grads[r_name].grad is None and grads[b_name].grad is not None


@pytest.mark.parametrize(("key", "algorithm"), [("residual", "fedex_lora"),
                                                ("personal_adapter", "feddpa")])  # fmt: skip
def test_a_model_flag_an_algorithm_now_declares_is_refused_naming_it(key, algorithm, tiny):
    """``model.args.residual`` / ``personal_adapter`` are gone: the algorithm declares its
    variant; a config that still sets one is told so in one line when it is read (before any
    data or model), and a model built by hand with one says the same."""
    from lightning_modules.registry import build_model

    with pytest.raises(ConfigError, match=f"algorithm.name={algorithm} declares") as err:
        config(tiny, algorithm, f"model.args={{source: {tiny}, rank: {RANK}, {key}: true}}")
    assert err.value.key == f"model.args.{key}" and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=f"algorithm.name={algorithm} declares"):
        build_model("causal_lm", {"source": tiny, "rank": RANK, key: True})


def test_the_declared_variant_is_built_on_any_adapted_base(tiny):
    """One builder: causal_lm and sequence_classifier alike get the variant asked for, and
    declare its entries (each residual out x in, each personal A and B beside the first)."""
    from lightning_modules.flat_params import ParamLayout
    from lightning_modules.registry import build_model

    for name, extra in (("causal_lm", {}), ("sequence_classifier", {"num_classes": 3})):
        for variant in ("residual", "personal", "scaled"):
            module = build_model(name, {"source": tiny, "rank": RANK}, adapter_variant=variant,
                                 **extra)  # fmt: skip
            parts, layout = module.adapter_parts(), ParamLayout.from_module(module)
            assert parts.variant == variant and len(parts.modules) == LAYERS * 2  # q, v
            for m in parts.modules:
                a, b = layout.by_name[m.a].shape, layout.by_name[m.b].shape
                if variant == "residual":
                    assert layout.by_name[m.residual].shape == (b[0], a[1])
                    assert m.personal_a is None
                elif variant == "personal":
                    assert layout.by_name[m.personal_a].shape == a
                    assert layout.by_name[m.personal_b].shape == b and m.residual is None
                else:
                    assert m.residual is None and m.personal_a is None
            assert (parts.mix is not None) == (variant == "personal")
            assert (parts.scale is not None) == (variant == "scaled")
            declared = {n for m in parts.modules for n in (m.a, m.b, m.residual, m.personal_a,
                                                           m.personal_b) if n}  # fmt: skip
            rest = {e.name for e in layout.entries} - declared
            assert rest == ({"head.weight", "head.bias"} if name != "causal_lm" else set()) | (
                {parts.mix, parts.reference} if variant == "personal" else set()) | (
                {parts.scale} if variant == "scaled" else set())


# the adapter contract covers every method that declares an adapter (ADAPTER in its params
# module), so a new one is picked up here; its bytes by hand are its line in expected_bytes
# (docs/howto/own-algorithm.md, "An adapter method")
METHODS = ADAPTER_ONLY


def expected_bytes(name: str, round_idx: int) -> tuple[int, int]:
    """(bytes_down, bytes_up) of a round of 3 clients, by hand (float32 entries)."""
    adapter = lora_params(RANK)
    a = LAYERS * 2 * RANK * HIDDEN  # q_proj's and v_proj's A: rank x hidden each
    residuals = LAYERS * HIDDEN * (HIDDEN + KV_HEADS * HEAD_DIM)  # dense, out x in
    per_client = {
        "fedsa_lora": (adapter if round_idx == 0 else a, a),  # the whole adapter first
        "ffa_lora": (adapter - a, adapter - a),  # B only
        "fedex_lora": (adapter + residuals, adapter),
        "feddpa": (adapter, adapter),  # the global adapter only
        "hetlora": (adapter, adapter),  # every client at the model's rank
    }
    assert name in per_client, f"{name} declares an adapter: add its bytes by hand here"
    return 3 * 4 * per_client[name][0], 3 * 4 * per_client[name][1]


@pytest.mark.parametrize("name", METHODS)
def test_lora_contract_resume_bytes_and_pickling(name, tiny, texts, tmp_path):
    """The algorithm contract on adapters: a run stopped after round 1 and resumed from its
    checkpoint (every state spilled to disk, the spill folders deleted) equals the
    uninterrupted one to the bit; bytes are what the protocol sends; the algorithm and its
    state survive pickling and give the same personalized models."""
    def run(rounds: int, out: Path, resume: Any = None) -> RunResult:
        cfg = config(tiny, name, f"rounds={rounds}", "checkpoint_every=1",
                     "runtime.state_memory_gb=0")  # fmt: skip
        return simulate(cfg, texts, out, resume)

    straight = run(2, tmp_path / "straight")
    for round_idx in range(2):
        summary = straight.history[round_idx]
        assert (summary["bytes_down"], summary["bytes_up"]) == expected_bytes(name, round_idx)
    stopped = run(1, tmp_path / "resumed")
    stopped.client_store.close()
    checkpoint = load_checkpoint(latest_checkpoint(tmp_path / "resumed"))
    resumed = run(2, tmp_path / "resumed", checkpoint)
    assert untimed(resumed.history) == untimed(straight.history)
    assert_same(resumed.state, straight.state)
    assert_same(resumed.client_store, straight.client_store, "client states")
    if name == "fedsa_lora":  # B stays on the clients
        assert len(straight.client_store.clients()) == 3
    algorithm = checkpoint.algorithm
    copy = pickle.loads(pickle.dumps(algorithm))
    for client in straight.client_store.clients():
        own, info = straight.client_store.get(client), copy.client_info(client, 2)
        assert_same(copy.personalized_params(straight.state, own, info),
                    algorithm.personalized_params(straight.state, own, info))  # fmt: skip
    for store in (straight.client_store, resumed.client_store):
        store.close()


@pytest.mark.parametrize("name", METHODS)
def test_ray_pool_equals_local(name, tiny, texts, ray_pool):
    cfg = config(tiny, name)
    local, ray = simulate(cfg, texts), simulate(cfg, texts, held=ray_pool)
    assert untimed(local.history) == untimed(ray.history)
    assert_same(local.state, ray.state)


@pytest.mark.parametrize("name", METHODS)
def test_newcomers_are_served_by_the_rule_and_change_no_training(name, tiny, texts):
    """A held-out pattern evaluated by the algorithm's newcomer rule (FedSA-LoRA fine-tunes
    its B one epoch), with clients judged after their training too: training is bit-identical
    to the run that evaluates none of that, and the held-out client keeps nothing."""
    cls = ALGORITHMS[name]
    options = ["eval.when=after_training", "eval.finetune_epochs=1"]
    options += ["eval.model=both"] if cls.has_global_model else []
    base = ["rounds=1", "data.num_clients=4", "eval.holdout_clients=1"]
    judged = simulate(config(tiny, name, *base, *options), texts)
    with newcomers_unevaluated(3):
        control = simulate(config(tiny, name, *base), texts)
    for a, b in zip(untimed(judged.history), untimed(control.history), strict=True):
        for key in ("train_loss", "num_trained", "bytes_down", "bytes_up"):
            assert a.get(key) == b.get(key), key
        assert math.isfinite(a["unseen/acc_weighted"]) and math.isfinite(a["participation_gap"])
    assert_same(judged.state, control.state)
    assert_same(judged.client_store, control.client_store, "client states")
    assert 3 not in judged.client_store.clients()
