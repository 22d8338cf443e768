"""Issue 64, adapters: a LoRA rank wider than the layers it adapts, HetLoRA's client_ranks
naming no client and min_rank above the model's rank: one line each, before data or weights."""

from __future__ import annotations

import inspect

import pytest
from lora_fixtures import HIDDEN, KV_HEADS, build_tiny_model

from fedsim.config import load_config
from fedsim.config.adapter_keys import DEFAULT_RANK
from fedsim.errors import ConfigError
from fedsim.pretrained import check_lora_rank

HETLORA = ["model.name=causal_lm", "data.name=shakespeare-lm", "data.num_clients=4",
           "algorithm.name=hetlora", "algorithm.tier_ranks={high: 8}"]  # fmt: skip
V_WIDTH = KV_HEADS * HIDDEN // 4  # the tiny Llama's v_proj: 32 -> 16


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-llama")))


def refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(None, [*HETLORA, *overrides])
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("client", ["99", "4", "ann", "-1"])
def test_client_ranks_naming_no_client_is_refused(client):
    line = refused(f"algorithm.client_ranks={{{client}: 1}}")
    assert line.startswith(f"algorithm.client_ranks.{client}=1: names no client")
    assert "0..3 (data.num_clients=4" in line


def test_client_tiers_naming_no_client_is_refused():
    line = refused("algorithm.client_tiers={ann: high}")
    assert line.startswith("algorithm.client_tiers.ann='high': names no client")


def test_min_rank_and_client_ranks_above_the_models_rank_are_refused():
    line = refused("model.args.rank=4", "algorithm.min_rank=5")
    assert line.startswith("algorithm.min_rank=5: must be at most the model's rank")
    assert "model.args.rank=4" in line
    line = refused("algorithm.client_ranks={1: 9}")  # the default rank, 8
    assert line.startswith("algorithm.client_ranks.1=9: a client's rank is at most the model's")
    cfg = load_config(None, [*HETLORA, "algorithm.client_ranks={0: 8, 3: 1}",
                             "algorithm.min_rank=8"])  # fmt: skip
    assert cfg.algorithm.params.client_ranks == {0: 8, 3: 1}


def test_the_default_rank_is_the_models():
    from lightning_modules.causal_lm import CausalLM
    from lightning_modules.sequence_classifier import SequenceClassifier

    for model in (CausalLM, SequenceClassifier):
        assert inspect.signature(model).parameters["rank"].default == DEFAULT_RANK


def test_a_rank_wider_than_the_adapted_layers_is_refused_from_the_structure(tiny):
    with pytest.raises(ConfigError) as err:
        check_lora_rank({"source": tiny, "rank": V_WIDTH + 1})
    line = str(err.value)
    assert line.startswith(f"model.args.rank={V_WIDTH + 1}: must be at most {V_WIDTH}")
    assert "v_proj" in line
    check_lora_rank({"source": tiny, "rank": V_WIDTH})  # as wide as the narrowest: accepted
    check_lora_rank({"source": tiny, "rank": HIDDEN, "targets": ["q_proj"]})


def test_the_rank_is_checked_before_the_data_is_built(tiny, monkeypatch):
    from fedsim import simulation

    def no_data(*args, **kwargs):
        raise AssertionError("the data was built before the rank was checked")

    monkeypatch.setattr(simulation, "assemble_data", no_data)
    source, rank = f"model.args.source={tiny}", f"model.args.rank={V_WIDTH + 1}"
    cfg = load_config(None, ["model.name=causal_lm", "data.name=shakespeare-lm", source, rank])
    with pytest.raises(ConfigError, match=r"^model\.args\.rank=17: must be at most 16"):
        simulation.Simulation(cfg)
