"""HetLoRA (``fedsim/algorithms/hetlora.py``): the zero-padded, norm-weighted aggregation
across ranks against a hand computation; on the tiny Llama of ``lora_fixtures.py``, low-rank
clients' bytes by hand, every client's model an exact rank-r LoRA, rank self-pruning lowering
ranks under its penalty, and its contract (resume to the bit, Ray = local)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import untimed
from lora_fixtures import HIDDEN, KV_HEADS, LAYERS, build_tiny_model
from test_feddpa import resumed_equals_straight, simulate

from fedsim.algorithm_params.hetlora import HetLoRAParams
from fedsim.algorithms.base import FederationInfo, WeightedSum
from fedsim.algorithms.hetlora import HetLoRA
from fedsim.config import load_config
from fedsim.errors import ConfigError
from lightning_modules.adapters import AdapterParts, LoraModule
from lightning_modules.flat_params import ParamEntry, ParamLayout

pytestmark = pytest.mark.xdist_group("lora")

RANKS = {0: 1, 1: 2, 2: 4}  # the model's rank, 4, is the largest
# bytes of one rank of the tiny model's adapter: A's row (in) and B's column (out) of q and v
PER_RANK = 4 * LAYERS * ((HIDDEN + HIDDEN) + (HIDDEN + KV_HEADS * HIDDEN // 4))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-llama")))


def hand_federation() -> FederationInfo:
    """One adapted module: A (3 x 2), B (2 x 3), max rank 3."""
    layout = ParamLayout([ParamEntry("m.lora_A.default.weight", (3, 2), 0, 6),
                          ParamEntry("m.lora_B.default.weight", (2, 3), 6, 6)])  # fmt: skip
    declared = AdapterParts("lora", (LoraModule("m", "m.lora_A.default.weight",
                                                "m.lora_B.default.weight"),))  # fmt: skip
    return FederationInfo(layout=layout, num_clients=3, num_classes=1,
                          train_sizes=np.array([10, 20, 30]), class_counts=np.ones((3, 1)),
                          head_names=[], block_names=[], block_parameters={},
                          adapters=declared)  # fmt: skip


@pytest.mark.parametrize("aggregation", ["sparsity", "n"])
def test_zero_padded_aggregation_across_ranks_by_hand(aggregation):
    algorithm = HetLoRA(HetLoRAParams(client_ranks={0: 1, 1: 2, 2: 3}, aggregation=aggregation,
                                      self_pruning=False, scaling="max_rank"),
                        hand_federation())  # fmt: skip
    nine = 9.0  # trained entries beyond a client's rank: zeroed before the upload
    trained = {
        0: ([[1, 0], [nine, nine], [nine, nine]], [[2, nine, nine], [0, nine, nine]]),
        1: ([[0, 1], [1, 0], [nine, nine]], [[3, 0, nine], [0, 4, nine]]),
        2: ([[1, 1], [0, 1], [1, 0]], [[0, 0, 3], [0, 0, 4]]),
    }
    sums: dict[str, WeightedSum] = {}
    broadcast = {"params": torch.zeros(12)}
    for client, (a, b) in trained.items():
        info = algorithm.client_info(client, 0)
        plan = algorithm.client_start(broadcast, algorithm.client_payload({}, client), None, info)
        flat = torch.tensor([*sum(a, []), *sum(b, [])], dtype=torch.float32)
        update = algorithm.client_finish(plan, flat, None, info)
        rank = client + 1
        assert algorithm.upload_nbytes(update) == 4 * rank * (2 + 2)  # its rank's A rows, B cols
        payload = algorithm.client_payload({}, client)
        assert algorithm.download_nbytes(broadcast, payload, None) == 4 * rank * (2 + 2)
        for key, (weight, value) in update.sums.items():
            sums.setdefault(key, WeightedSum()).add(weight, value)
    new = algorithm.aggregate(broadcast, sums, {}, algorithm.context(0))["params"]
    a, b = new[:6].view(3, 2), new[6:].view(2, 3)
    if aggregation == "sparsity":  # |B_k A_k|_F: |[[2,0],[0,0]]| = 2, |[[0,3],[4,0]]| = 5, 5
        expected_a = torch.tensor([[7, 10], [5, 5], [5, 0]]) / 12
        expected_b = torch.tensor([[19, 0, 15], [0, 20, 20]]) / 12
    else:  # n_k = 10, 20, 30
        expected_a = torch.tensor([[40, 50], [20, 30], [30, 0]]) / 60
        expected_b = torch.tensor([[80, 0, 90], [0, 80, 120]]) / 60
    assert torch.allclose(a, expected_a.float()) and torch.allclose(b, expected_b.float())


def config(tiny: str, root, *overrides: str):
    ranks = "{" + ", ".join(f"{c}: {r}" for c, r in RANKS.items()) + "}"
    return load_config("configs/quickstart.yaml", [
        "runtime.executor=local", "data.name=shakespeare-lm", "data.num_clients=3",
        "data.min_samples=8", "data.max_client_samples=12", "data.max_length=16",
        f"data.root={root}", "model.name=causal_lm", f"model.args={{source: {tiny}, rank: 4}}",
        "algorithm.name=hetlora", f"algorithm.client_ranks={ranks}", "rounds=2",
        "client.batch_size=8", "client.optimizer=adam", "client.lr=0.01", "join_ratio=1.0",
        *overrides,
    ])  # fmt: skip


def run(tiny: str, tmp_path, *overrides: str):
    return simulate(tiny, config(tiny, tmp_path / "data", *overrides))


@pytest.mark.parametrize("scaling", ["client_rank", "max_rank"])
def test_low_rank_clients_cost_less_and_train_exact_rank_r_adapters(scaling, tiny, tmp_path):
    """A rank-r client's model is a rank-r LoRA at alpha / r (client_rank, the
    reimplementation) or at the model's alpha / r_max (max_rank); the scale never travels."""
    from lightning_modules.causal_lm import CausalLM
    from lightning_modules.flat_params import bind_flat_parameters

    sim, result = run(tiny, tmp_path, "algorithm.self_pruning=false",
                      f"algorithm.scaling={scaling}")  # fmt: skip
    for summary in result.history[:2]:  # ranks 1 + 2 + 4 where FedAvg sends 3 x 4, each way
        assert summary["bytes_up"] == summary["bytes_down"] == 7 * PER_RANK < 12 * PER_RANK
    algorithm, server = sim.algorithm, result.state["params"]
    x = torch.tensor([[5, 6, 7, 8, 9, 10]])
    for client, rank in RANKS.items():
        model = algorithm.personalized_params(result.state, result.client_store.get(client),
                                              algorithm.client_info(client, 2))  # fmt: skip
        held = algorithm.rank_index(rank)
        assert torch.equal(model[held], server[held])
        assert model.count_nonzero() <= held.numel() + 1  # and the scale factor
        # the max-rank module with rank r's entries is a rank-r LoRA (same alpha / r scale)
        full = CausalLM(source=tiny, rank=4, adapter_variant="scaled").eval()
        flat, layout = bind_flat_parameters(full)
        flat.data.copy_(model)
        alpha = 16.0 if scaling == "client_rank" else 16.0 * rank / 4
        small = CausalLM(source=tiny, rank=rank, alpha=alpha).eval()
        with torch.no_grad():
            for name, p in small.named_parameters():
                if ".lora_A." in name:
                    p.copy_(layout.view(flat, name)[:rank])
                elif ".lora_B." in name:
                    p.copy_(layout.view(flat, name)[:, :rank])
            assert torch.allclose(full(x), small(x), atol=1e-5), client
    assert server.count_nonzero() > algorithm.rank_index(2).numel()  # rank 4's own columns


def test_a_client_prunes_exactly_when_its_tail_shrank():
    """gamma 0.5 at rank 3: the tail is rank 1..3; a client whose tail norm product fell in
    its round keeps floor(0.5 x 3) = 1 rank, one whose tail grew keeps 3."""
    algorithm = HetLoRA(HetLoRAParams(client_ranks={0: 3}, prune_gamma=0.5, prune_lambda=0.1,
                                      scaling="max_rank"), hand_federation())  # fmt: skip
    received = torch.tensor([1, 1, 2, 2, 2, 2, 1, 2, 2, 1, 2, 2], dtype=torch.float32)
    info = algorithm.client_info(0, 1)
    plan = algorithm.client_start({"params": received}, {}, None, info)
    assert plan.terms is not None and plan.terms.tail == 1  # the penalty on ranks 1..3
    shrunk, grown = received.clone(), received.clone()
    shrunk[2:6] = 1.0  # A's tail rows: |A_tail| |B_tail| falls
    grown[2:6] = 3.0
    assert algorithm.client_finish(plan, shrunk, None, info).state == {"rank": 1}
    assert algorithm.client_finish(plan, grown, None, info).state == {"rank": 3}
    assert algorithm.rank_now(0, {"rank": 1}) == 1  # what its next round trains at


def test_self_pruning_lowers_ranks_under_its_penalty(tiny, tmp_path):
    """Under a strong tail penalty the clients above min_rank prune (rank 2 to 1, rank 4 to
    2 or 1), and a later round costs fewer bytes than the first (no pruning: the same)."""
    sim, result = run(tiny, tmp_path, "rounds=3", "algorithm.prune_lambda=5.0",
                      "algorithm.prune_gamma=0.5")  # fmt: skip
    ranks = {c: result.client_store.get(c)["rank"] for c in RANKS}
    assert ranks[0] == 1 and ranks[1] == 1 and ranks[2] in (1, 2), ranks
    up = [s["bytes_up"] for s in result.history[:3]]
    assert up[0] == 7 * PER_RANK and up[2] < up[0], up


def test_resume_and_ray_equal_the_straight_local_run(tiny, tmp_path, ray_pool):
    """With ranks pruned between rounds (client state), a resumed run and the Ray pool
    equal the straight local run to the bit; a held-out client gets the whole global adapter
    and is scored."""
    cfg = config(tiny, tmp_path / "data", "algorithm.prune_lambda=5.0",
                 "algorithm.prune_gamma=0.5", "checkpoint_every=1", "rounds=3",
                 "data.num_clients=4", "eval.holdout_clients=0.25", "eval.model=both")  # fmt: skip
    straight = resumed_equals_straight(tiny, cfg, tmp_path)
    last = straight.history[-1]
    assert np.isfinite(last["unseen/loss"]) and np.isfinite(last["global/loss"])
    _, ray = simulate(tiny, cfg, held=ray_pool)
    assert untimed(ray.history) == untimed(straight.history)
    assert torch.equal(ray.state["params"], straight.state["params"])


def test_bad_ranks_and_models_without_lora_are_refused_in_one_line(tiny, tmp_path):
    from fedsim.simulation import Simulation

    with pytest.raises(ConfigError, match="model.args.rank=4") as err:  # from the config alone
        config(tiny, tmp_path / "data", "algorithm.client_ranks={1: 5}")
    assert err.value.key == "algorithm.client_ranks.1"
    with pytest.raises(ConfigError) as err:
        load_config(None, ["algorithm.name=hetlora", "algorithm.client_tiers={0: tiny}"])
    assert err.value.key == "algorithm.client_tiers.0"
    cnn = load_config("configs/quickstart.yaml", ["algorithm.name=hetlora", "data.name=mnist-5k"])
    with pytest.raises(ConfigError, match="model.name=causal_lm") as err:
        Simulation(cnn)
    assert "\n" not in str(err.value)
