"""Common Lightning idioms in a user's module, and what fedsim says about the rest.

torchmetrics ``Metric`` s logged with ``self.log`` (per client, reset between clients),
``reduce_fx`` / ``on_step`` / ``on_epoch`` / ``log_dict``, a dict from ``training_step``, the
epoch hooks, lazy layers; a model that does not fit the data refused in one line before any
folder; a ``features`` that is not the output layer's input refused; the notes for what an
algorithm does not use of a module; every built-in model provides what the built-in
algorithms need.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from helpers import quickstart

from fedsim.algorithms import ALGORITHMS
from fedsim.cli import main
from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment
from fedsim.runtime.model_fit import check_features, fit_model
from fedsim.simulation import Simulation
from lightning_modules.blocks import output_layer
from lightning_modules.registry import MODEL_NAMES, build_model

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
IDIOMS = "fedsim_plugins.idioms:"
PLAIN_CNN = "fedsim_plugins.plain_cnn:PlainCNN"
TINY = ["data.num_clients=4", "data.max_samples=400", "rounds=2", "client.lr=null"]


@pytest.fixture(autouse=True)
def examples_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def run(tmp_path: Path, *overrides: str):
    torch.set_num_threads(1)
    return run_experiment(quickstart(*TINY, *overrides), tmp_path / "run", progress=False)


def test_metrics_tensors_and_hooks_are_logged_per_client(tmp_path: Path) -> None:
    result = run(tmp_path, f"model.name={IDIOMS}MetricNet", "client.epochs=2")
    with open(tmp_path / "run" / "clients.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/acc")]
    assert len(rows) >= 4
    for row in rows:  # the Metric holds this client's steps only: reset between clients
        correct, seen = float(row["train/correct"]), float(row["train/seen"])
        assert float(row["train/acc"]) == pytest.approx(correct / seen, abs=1e-6)
        assert float(row["train/epochs"]) == 2.0  # on_train_epoch_start / _end, per epoch
    summary = result.history[0]
    assert {"train/acc", "train/loss", "train/worst", "train/correct"} <= set(summary)
    assert 0.0 < summary["train/acc"] <= 1.0


def test_lazy_layers_are_materialized_by_a_sample_batch(tmp_path: Path) -> None:
    cfg = quickstart(*TINY, f"model.name={IDIOMS}LazyNet")
    first, second = Simulation(cfg), Simulation(cfg)
    assert first.initial_params.numel() == 784 * 32 + 32 + 32 * 10 + 10
    assert torch.equal(first.initial_params, second.initial_params)  # seeded
    result = run(tmp_path, f"model.name={IDIOMS}LazyNet")
    assert result.history[-1]["acc_weighted"] > 0.3


def test_a_model_that_does_not_fit_is_one_line_before_any_folder(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    for extra in (["--check"], []):
        code = main(
            ["run", "configs/quickstart.yaml", *TINY, f"model.name={IDIOMS}Fixed14",
             "runtime.executor=local", "--out", str(out), *extra]
        )  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert (
            "Fixed14 does not fit the data: a batch of shape (2, 1, 28, 28) fails in layer "
            "body.1 (Linear): RuntimeError: mat1 and mat2 shapes cannot be multiplied" in err
        )
        assert not out.exists()


def test_features_must_be_what_the_output_layer_reads() -> None:
    cfg = quickstart(*TINY, f"model.name={IDIOMS}WrongFeatures", "algorithm.name=moon")
    with pytest.raises(ConfigError, match=r"WrongFeatures.features\(x\) must be what its output"):
        Simulation(cfg)


def test_notes_say_what_an_algorithm_does_not_use(capsys) -> None:
    own = ["model.name=fedsim_plugins.lightning_plain:PlainNet"]
    Simulation(quickstart(*TINY, *own, "algorithm.name=moon"))
    err = capsys.readouterr().err
    assert "fedsim: note: algorithm.name=moon trains on its own objective" in err
    assert "PlainNet.training_step is not called" in err
    Simulation(quickstart(*TINY, *own, "algorithm.name=apfl"))
    err = capsys.readouterr().err
    assert "algorithm.name=apfl steps plain SGD on cross-entropy gradients in its own loop" in err
    assert "PlainNet's optimizer and PlainNet.training_step are not used" in err
    Simulation(quickstart(*TINY[:-1], "algorithm.name=apfl"))  # a built-in: nothing to say
    assert "note" not in capsys.readouterr().err


# causal_lm and sequence_classifier (a pretrained LM with an adapter) take token ids, not the
# images below, and have no features(x): MOON and FedRoD refuse such a model in one line
# (fedsim/runtime/model_contract.py; causal_lm's case in tests/test_lora_adapters.py)
PRETRAINED_LMS = ("causal_lm", "sequence_classifier")


@pytest.mark.parametrize("model", [m for m in MODEL_NAMES if m not in PRETRAINED_LMS])
def test_every_built_in_model_gives_what_built_in_algorithms_need(model: str) -> None:
    shapes = {
        "resnet18": {"in_channels": 3, "num_classes": 10, "image_size": 32},
        "char_lstm": {"vocab_size": 80, "seq_len": 80, "num_classes": 80},
    }.get(model, {"in_channels": 1, "num_classes": 10, "image_size": 28})
    torch.manual_seed(0)
    module = build_model(model, **shapes)
    if model == "char_lstm":
        x = torch.randint(0, 80, (2, 80))
    else:
        x = torch.randn(2, shapes["in_channels"], shapes["image_size"], shapes["image_size"])
    batch = (x, torch.zeros(2, dtype=torch.long))
    fit_model(module, batch, shapes["num_classes"], model)
    needs = {need for cls in ALGORITHMS.values() for need in cls.model_needs}
    assert needs == {"features"}
    check_features(module, batch, output_layer(module), model)


def test_a_training_step_dict_without_a_loss_is_one_line(tmp_path: Path) -> None:
    from fedsim.runtime.lightning_steps import step_loss

    assert step_loss({"loss": torch.tensor(1.0)}, "Net").item() == 1.0
    assert step_loss(None, "Net") is None
    with pytest.raises(ConfigError, match="training_step returns tuple"):
        step_loss((torch.tensor(1.0),), "Net")


def test_metrics_jsonl_has_the_logged_means(tmp_path: Path) -> None:
    run(tmp_path, f"model.name={IDIOMS}MetricNet")
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["train/seen"] > first["train/correct"] >= 0


def test_ditto_records_its_personal_pass_beside_the_global_one(tmp_path: Path) -> None:
    result = run(tmp_path, f"model.name={IDIOMS}MetricNet", "algorithm.name=ditto")
    first = result.history[0]
    assert {"train/personal/train_loss", "train/personal/acc", "train/acc"} <= set(first)
    assert first["train/personal/train_loss"] != first["train_loss"]


def test_model_args_reach_the_constructor_and_are_searchable(tmp_path: Path) -> None:
    from fedsim.config import config_from_dict
    from fedsim.config.compose import load_raw
    from fedsim.search.space import parse_space, validate_search, with_values

    plain = f"model.name={IDIOMS}MetricNet"
    cfg = quickstart(*TINY, "model.name=" + PLAIN_CNN, "model.args.lr=0.2")
    sim = Simulation(cfg)
    assert sim.base_lr == 0.2 and cfg.to_dict()["model"]["args"] == {"lr": 0.2}
    raw = load_raw("configs/quickstart.yaml", [*TINY, "model.name=" + PLAIN_CNN])
    space = parse_space("model.args.lr=loguniform(0.001,0.1)")
    validate_search(raw, [space])
    assert config_from_dict(with_values(raw, {"model.args.lr": 0.01})).model.args == {"lr": 0.01}
    with pytest.raises(ConfigError, match="model.args.num_classes=3: fedsim passes it"):
        Simulation(quickstart(*TINY, plain, "model.args.num_classes=3"))
    with pytest.raises(ConfigError, match="model.args.lr=0.1: FedAvgCNN takes its lr from client"):
        Simulation(quickstart(*TINY[:-1], "model.args.lr=0.1"))
