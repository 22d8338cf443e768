"""A LoRA run's adapters as peft folders (``fedsim/runtime/adapter_export.py``, issue 61):
written at the end and every ``adapters.save_every`` rounds, loaded by plain peft on the same
base with the same logits as fedsim's model for that client, and a new run's start
(``adapters.start_from``). Everything on the tiny Llama of ``lora_fixtures.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment

pytestmark = [pytest.mark.xdist_group("lora"), pytest.mark.usefixtures("few_plays")]
RANK = 2
X = torch.tensor([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]])




@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("lm-data"))


def lm_config(tiny: str, root: str, *overrides: str, args: str = ""):
    return load_config("configs/quickstart.yaml", [
        "runtime.executor=local", "data.name=shakespeare-lm", "data.num_clients=3",
        "data.min_samples=8", "data.max_client_samples=8", "data.max_length=16",
        f"data.root={root}", "model.name=causal_lm",
        f"model.args={{source: {tiny}, rank: {RANK}{args}}}",
        "rounds=2", "client.batch_size=4", "client.optimizer=adam", "client.lr=0.01", *overrides,
    ])  # fmt: skip


def fedsim_logits(tiny: str, flat: torch.Tensor, args: dict | None = None) -> torch.Tensor:
    """fedsim's own model (with the base's weights) holding ``flat``: logits (B, T, V)."""
    from lightning_modules.causal_lm import CausalLM
    from lightning_modules.flat_params import bind_flat_parameters

    module = CausalLM(source=tiny, rank=RANK, **(args or {}))
    bound, _ = bind_flat_parameters(module)
    bound.copy_(flat)
    with torch.no_grad():
        return module(X).transpose(1, 2)


def peft_logits(tiny: str, folder: Path) -> torch.Tensor:
    """Plain transformers + peft: the base loaded, the folder's adapter on it."""
    import peft
    import transformers

    base = transformers.AutoModelForCausalLM.from_pretrained(tiny)
    model = peft.PeftModel.from_pretrained(base, str(folder)).eval()
    with torch.no_grad():
        return model(input_ids=X).logits


def personal(result, client: int) -> torch.Tensor:
    """The model fedsim evaluates ``client`` with, from the run's final state."""
    algorithm = result.simulation.algorithm
    info = algorithm.client_info(client, 2)
    return algorithm.personalized_params(result.state, result.client_store.get(client), info)


def run(cfg, out: Path):
    from fedsim.simulation import Simulation

    simulation = Simulation(cfg)
    result = run_experiment(cfg, out, progress=False, report=False, simulation=simulation)
    result.simulation = simulation
    return result


@pytest.mark.parametrize(
    ("algorithm", "args", "has_global"),
    [("fedavg", "", True), ("fedsa_lora", "", False), ("ditto", "", True),
     ("fedper", "", False), ("feddpa", "", True)],  # FedDPA declares its personal adapter
)  # fmt: skip
def test_peft_loads_each_adapter_with_fedsim_logits(
    tiny, data_root, tmp_path, algorithm, args, has_global
):
    extra = ["algorithm.personal_layers=1"] if algorithm == "fedper" else []
    if algorithm == "feddpa":
        extra = ["algorithm.dynamic=false", "algorithm.max_weight=0.3"]
    result = run(lm_config(tiny, data_root, f"algorithm.name={algorithm}", *extra, args=args),
                 tmp_path / "run")  # fmt: skip
    folder = tmp_path / "run" / "adapters"
    index = json.loads((folder / "index.json").read_text())
    assert (index["global"] is not None) == has_global
    model_args = {"adapter_variant": "personal"} if algorithm == "feddpa" else {}
    if has_global:
        assert (folder / "global" / "adapter_config.json").is_file()
        flat = result.simulation.algorithm.global_params(
            result.simulation.algorithm.broadcast(result.state)
        )
        torch.testing.assert_close(
            peft_logits(tiny, folder / "global"),
            fedsim_logits(tiny, flat, model_args),
            rtol=1e-4,
            atol=1e-5,
        )
    clients = index["clients"]
    assert len(clients) == 3
    if algorithm == "fedavg":  # one model for all: no client folder repeats it
        assert {e["folder"] for e in clients.values()} == {"global"}
        assert not (folder / "clients").exists()
        return
    assert len(clients) == 3
    for entry in clients.values():
        sub = folder / entry["folder"]
        assert {p.name for p in sub.iterdir()} >= {"adapter_config.json",
                                                   "adapter_model.safetensors"}  # fmt: skip
        assert entry["note"] is None
        mine = fedsim_logits(tiny, personal(result, entry["id"]), model_args)
        torch.testing.assert_close(peft_logits(tiny, sub), mine, rtol=1e-4, atol=1e-5)
    # the clients' adapters differ: each holds its own personal part
    a, b = (peft_logits(tiny, folder / e["folder"]) for e in list(clients.values())[:2])
    assert not torch.allclose(a, b)


def test_every_k_rounds_and_a_new_run_starts_from_an_adapter(tiny, data_root, tmp_path):
    first = run(lm_config(tiny, data_root, "adapters.save_every=1", "rounds=3"),
                tmp_path / "first")  # fmt: skip
    folder = tmp_path / "first" / "adapters"
    assert sorted(p.name for p in folder.glob("round-*")) == ["round-1", "round-2"]
    assert json.loads((folder / "round-2" / "index.json").read_text())["rounds"] == 2
    # the new run's initial global adapter is the folder's, to the bit
    from fedsim.simulation import Simulation

    cfg = lm_config(tiny, data_root, f"adapters.start_from={folder / 'global'}")
    started = Simulation(cfg).initial_params
    final = first.simulation.algorithm.global_params(first.simulation.algorithm.broadcast(
        first.state))  # fmt: skip
    assert torch.equal(started, final.float())
    fresh = Simulation(lm_config(tiny, data_root)).initial_params
    assert not torch.equal(started, fresh)


def test_a_wrong_start_or_save_every_is_one_line(tiny, data_root, tmp_path):
    run(lm_config(tiny, data_root, "rounds=1"), tmp_path / "r2")
    from fedsim.simulation import Simulation

    with pytest.raises(ConfigError, match=r"adapters.start_from=.*has r=2 and this run's "
                       r"adapter r=4"):  # fmt: skip
        cfg = lm_config(tiny, data_root, f"adapters.start_from={tmp_path / 'r2/adapters/global'}",
                        "model.args.rank=4")  # fmt: skip
        Simulation(cfg)
    with pytest.raises(ConfigError, match="adapters.start_from=.*save_pretrained folder"):
        Simulation(lm_config(tiny, data_root, f"adapters.start_from={tmp_path}"))
    with pytest.raises(ConfigError, match="adapters.save_every=2: the model has no peft adapter"):
        Simulation(load_config("configs/quickstart.yaml", ["adapters.save_every=2",
                                                           "data.name=mnist-5k"]))  # fmt: skip
