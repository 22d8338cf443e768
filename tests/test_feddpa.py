"""FedDPA (``fedsim/algorithms/feddpa.py``) on the tiny Llama of ``lora_fixtures.py``: the two
adapters' per-instance combination against a hand computation, the personal+global mix
beating the global adapter alone on each client's own (clearly different) text, its contract
(resume to the bit, Ray = local, bytes by hand, a newcomer) and its refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import lent_ray_executor, untimed
from lora_fixtures import build_tiny_model, lora_params

from fedsim.config import load_config
from fedsim.errors import ConfigError

pytestmark = pytest.mark.xdist_group("lora")

RANK = 2
# three clients, each its own kind of text: the global adapter learns their mixture
VOICES = {
    "counter": " ".join(str(i % 10) for i in range(600)),
    "shout": "TO BE OR NOT TO BE THAT IS THE QUESTION " * 40,
    "vowels": "aeiou uoiea " * 110,
    "hum": "mm hmm, mhm. " * 100,  # the held-out one where a test holds one out
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-llama")))


def voices_data(tiny: str, cfg):
    """The first ``data.num_clients`` voices as natural clients (16-token windows)."""
    from fedsim.data.assemble import build_data
    from fedsim.data.lm_text import tokenize_clients
    from fedsim.pretrained import load_tokenizer

    texts = [({"role": name}, [text]) for name, text in VOICES.items()][: cfg.data.num_clients]
    dataset = tokenize_clients("voices", texts, load_tokenizer("data.tokenizer", tiny), tiny,
                               16, True)  # fmt: skip
    return build_data(cfg, dataset)


def simulate(tiny: str, cfg, run_dir=None, resume=None, held=None):
    """(Simulation, RunResult) of ``cfg`` on the voices: local, or on the lent Ray pool."""
    from fedsim.runtime.executor import LocalExecutor
    from fedsim.simulation import Simulation

    torch.set_num_threads(1)
    sim = Simulation(cfg, voices_data(tiny, cfg))
    sim.worker_spec.num_threads = 1
    pool = LocalExecutor(sim.worker_spec, sim.data) if held is None else (
        lent_ray_executor(sim, held))  # fmt: skip
    try:
        return sim, sim.run(pool, run_dir=run_dir, resume=resume)
    finally:
        pool.close()


def resumed_equals_straight(tiny: str, cfg, tmp_path) -> object:
    """Run ``cfg`` straight, and stopped after round 1 then resumed from its checkpoint;
    assert the two agree to the bit (history, server state, client states); the straight
    run's result."""
    import dataclasses

    from fedsim.checkpoint import latest_checkpoint, load_checkpoint

    _, straight = simulate(tiny, cfg, run_dir=tmp_path / "straight")
    simulate(tiny, dataclasses.replace(cfg, rounds=1), run_dir=tmp_path / "resumed")
    checkpoint = load_checkpoint(latest_checkpoint(tmp_path / "resumed"))
    _, resumed = simulate(tiny, cfg, run_dir=tmp_path / "resumed", resume=checkpoint)
    assert untimed(resumed.history) == untimed(straight.history)
    assert torch.equal(resumed.state["params"], straight.state["params"])
    assert straight.client_store.clients() == resumed.client_store.clients()
    for client in straight.client_store.clients():
        a, b = straight.client_store.get(client), resumed.client_store.get(client)
        assert a.keys() == b.keys(), client
        assert all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a), client
    return straight


def config(tiny: str, root, *overrides: str):
    return load_config("configs/quickstart.yaml", [
        "runtime.executor=local", "data.name=shakespeare-lm", "data.num_clients=3",
        "data.min_samples=8", "data.max_client_samples=40", "data.max_length=16",
        f"data.root={root}", "model.name=causal_lm",
        f"model.args={{source: {tiny}, rank: {RANK}}}",
        "algorithm.name=feddpa", "rounds=3", "client.batch_size=8", "client.optimizer=adam",
        "client.lr=0.01", "join_ratio=1.0", *overrides,
    ])  # fmt: skip


@pytest.mark.parametrize(("fraction", "last"), [(1.0, [4, 2]), (0.5, [1, 0])])
def test_the_mix_of_the_two_adapters_is_the_hand_computed_one(tiny, fraction, last):
    """Instance i's output is that of one LoRA of rank 2r made of both adapters, its global
    half scaled by alpha_i = w <e_i/|e_i|, m> and its personal half by 1 - alpha_i, e_i the
    last hidden state under the personal adapter alone at the last token of the instance's
    prefix of floor(f L_i) tokens (f = 1: the last real token; 0.5: the first half, the
    official code's prompt-only weight)."""
    from lightning_modules.causal_lm import CausalLM
    from lightning_modules.dual_adapter import MIX, REFERENCE
    from lightning_modules.flat_params import bind_flat_parameters

    torch.manual_seed(0)
    dual = CausalLM(source=tiny, rank=RANK, adapter_variant="personal").eval()
    flat, layout = bind_flat_parameters(dual)
    with torch.no_grad():
        flat.normal_(0, 0.3)
        w, m = 0.5, torch.nn.functional.normalize(torch.randn(32), dim=0)
        layout.view(flat, MIX).copy_(torch.tensor([0.0, 1.0, w, fraction]))
        layout.view(flat, REFERENCE).copy_(m)
    x = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, -1, -1]])
    with torch.no_grad():
        mixed = dual(x)
    weights = {n: layout.view(flat, n).detach().clone() for n in layout.by_name}

    def single(rank: int, alpha: float, assign) -> CausalLM:
        model = CausalLM(source=tiny, rank=rank, alpha=alpha).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".lora_" in name:
                    p.copy_(assign(name))
        return model

    personal_only = single(RANK, 16.0, lambda n: weights[n.replace(".default.", ".personal.")])
    with torch.no_grad():
        hidden = personal_only.lm(input_ids=x.clamp(min=0), attention_mask=(x >= 0).long(),
                                  output_hidden_states=True).hidden_states[-1]  # fmt: skip
    last = torch.tensor(last)  # of 5 and 3 real tokens
    unit = torch.nn.functional.normalize(hidden[torch.arange(2), last], dim=-1)
    alphas = w * (unit @ m)
    assert not torch.allclose(alphas[0], alphas[1])  # two different weights in one batch
    for i, alpha in enumerate(alphas.tolist()):
        def stacked(name: str, alpha=alpha) -> torch.Tensor:
            g = weights[name]
            p = weights[name.replace(".default.", ".personal.")]
            if ".lora_A." in name:
                return torch.cat([g, p], 0)  # (2r, in)
            return torch.cat([alpha * g, (1 - alpha) * p], 1)  # (out, 2r)

        # rank 2r with alpha 2 x 16 keeps peft's scale alpha / r
        expected = single(2 * RANK, 32.0, stacked)(x[i : i + 1])
        assert torch.allclose(mixed[i : i + 1], expected, atol=1e-5), i


def test_personal_and_global_beat_the_global_adapter_alone_on_each_clients_text(tiny, tmp_path):
    """The paper's claim on personalization: with clients of clearly different text, each
    client's mix of the global and its personal adapter has a lower loss on its own test text
    than the global adapter alone (under FedAvg the two would be the same model)."""
    from fedsim.runtime.training import evaluate_client
    from lightning_modules.causal_lm import CausalLM
    from lightning_modules.flat_params import bind_flat_parameters

    cfg = config(tiny, tmp_path / "data", "rounds=4", "client.lr=0.02",
                 "algorithm.personal_epochs=2")  # fmt: skip
    sim, result = simulate(tiny, cfg)
    algorithm = sim.algorithm
    module = CausalLM(source=tiny, rank=RANK, adapter_variant="personal")
    flat, _ = bind_flat_parameters(module)
    alone = algorithm.global_params(algorithm.broadcast(result.state))
    gaps = []
    for client in range(3):
        info = algorithm.client_info(client, 4)
        mixed = algorithm.personalized_params(result.state, result.client_store.get(client), info)
        losses = []
        for params in (mixed, alone):
            flat.data.copy_(params)
            test = sim.data.split(client).test
            ev = evaluate_client(module, sim.data.dataset, test, batch_size=8)
            losses.append(ev.loss_sum / ev.num_samples)
        gaps.append(losses[1] - losses[0])
    assert min(gaps) > 0.05, gaps  # nats per token on every client (FedAvg: exactly 0)


def test_before_its_first_personal_pass_feddpa_is_fedavg_to_the_digit(tiny, tmp_path):
    """Round 0 trains no personal adapter (the official code), the main pass trains the global
    adapter alone, and on equal clients the uniform mean is FedAvg's n-weighted one: what is
    evaluated at rounds 0 (the initial model) and 1 (after one round) equals FedAvg's to every
    digit, so a one-round lr grid cannot tune FedDPA's personal part (benchmarks/debian_tune.py
    gives it two rounds); round 2, after the first personal pass, differs."""
    equal = ("rounds=2", "data.min_samples=8", "data.max_client_samples=8",
             "eval.validation_ratio=0.25")  # fmt: skip
    _, dpa = simulate(tiny, config(tiny, tmp_path / "data", *equal))
    _, avg = simulate(tiny, config(tiny, tmp_path / "data", *equal, "algorithm.name=fedavg"))
    keys = [k for k in avg.history[0] if k.endswith(("loss", "accuracy", "perplexity"))]
    assert "loss" in keys and "val/loss" in keys, sorted(avg.history[0])
    for r in (0, 1):
        assert [dpa.history[r][k] for k in keys] == [avg.history[r][k] for k in keys], r
    assert all(dpa.history[2][k] != avg.history[2][k] for k in ("loss", "val/loss"))


@pytest.mark.slow
def test_bytes_resume_ray_and_a_newcomer(tiny, tmp_path, ray_pool):
    """The contract on adapters: only the global adapter travels (bytes by hand), a run
    resumed from round 1 equals the straight one to the bit, the Ray pool equals the local
    executor, and a held-out client fine-tunes a personal adapter and is scored."""
    cfg = config(tiny, tmp_path / "data", "data.num_clients=4", "eval.holdout_clients=0.25",
                 "eval.finetune_epochs=1", "checkpoint_every=1", "data.max_client_samples=8",
                 "eval.model=both", "rounds=2")  # fmt: skip
    straight = resumed_equals_straight(tiny, cfg, tmp_path)  # round 1: the personal pass
    per_client = 4 * lora_params(RANK)  # float32 global adapter, each way (3 members)
    for summary in straight.history[:2]:
        assert summary["bytes_up"] == summary["bytes_down"] == 3 * per_client
    last = straight.history[-1]
    assert np.isfinite(last["unseen/loss"]) and np.isfinite(last["participation_gap"])
    assert np.isfinite(last["global/loss"])
    assert len(straight.client_store.clients()) == 3  # the newcomer keeps nothing
    _, ray = simulate(tiny, cfg, held=ray_pool)
    assert untimed(ray.history) == untimed(straight.history)
    assert torch.equal(ray.state["params"], straight.state["params"])


def test_a_model_without_an_adapter_is_refused_in_one_line():
    from fedsim.simulation import Simulation

    cnn = load_config("configs/quickstart.yaml", ["algorithm.name=feddpa", "data.name=mnist-5k"])
    with pytest.raises(ConfigError, match="model.name=causal_lm") as err:
        Simulation(cnn)
    assert "\n" not in str(err.value)
