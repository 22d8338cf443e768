"""A LoRA model's keys are answered from the config alone (no torch, no model, no data): a
wrong rank, alpha, dropout, target list or dtype is one line in about a second, with the
same words the model's constructor uses (one set of rules: lightning_modules/lora_args.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedsim.config import load_config
from fedsim.errors import ConfigError
from lightning_modules.adapters import check_lora

REPO = Path(__file__).resolve().parents[1]
LORA = "configs/lora/shakespeare-smollm2-fedavg.yaml"
BAD = [
    ("rank", "0", "the LoRA rank must be an integer >= 1"),
    ("rank", "2.5", "the LoRA rank must be an integer >= 1"),
    ("alpha", "-1", "LoRA's alpha must be a number > 0"),
    ("dropout", "1.0", "must be in [0, 1)"),
    ("targets", "[]", "a list of module names"),
    ("layers", "[-1]", "a list of layer indices >= 0"),
    ("layers", "3", "a list of layer indices >= 0"),
    ("dtype", "float8", "allowed: "),
]
RETIRED = [  # model flags an algorithm's adapter declaration replaced
    ("residual", "true", "is gone: algorithm.name=fedex_lora declares the adapter variant"),
    ("personal_adapter", "true", "is gone: algorithm.name=feddpa declares the adapter variant"),
]


@pytest.mark.parametrize(("name", "value", "words"), BAD + RETIRED)
def test_a_bad_lora_key_is_refused_by_the_config(name, value, words):
    with pytest.raises(ConfigError) as refused:
        load_config(str(REPO / LORA), [f"model.args.{name}={value}"])
    assert str(refused.value).startswith(f"model.args.{name}=") and words in str(refused.value)


@pytest.mark.parametrize(("name", "value", "words"), BAD)
def test_the_model_refuses_them_in_the_same_words(name, value, words):
    import yaml

    args = {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": ["q_proj"], "dtype": "float32"}
    args[name] = yaml.safe_load(value)
    with pytest.raises(ConfigError) as refused:
        check_lora(**args)
    assert words in str(refused.value)


def test_a_wrong_rank_is_one_line_without_torch():
    script = (
        "import sys\nfrom fedsim.cli import main\n"
        f"code = main(['run', '{LORA}', 'model.args.rank=0', '--check'])\n"
        "print(code, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.stdout.split() == ["2", "False"], done.stdout + done.stderr
    line = "fedsim: error: model.args.rank=0: the LoRA rank must be an integer >= 1"
    assert done.stderr.strip() == line


def test_layers_adapt_only_those_layers_and_are_checked_against_the_model(tiny):
    from lora_fixtures import LAYERS

    from lightning_modules.causal_lm import CausalLM

    top = CausalLM(source=tiny, rank=2, layers=[LAYERS - 1])
    adapted = {n.split(".layers.")[1].split(".")[0] for n, p in top.named_parameters()
               if p.requires_grad}  # fmt: skip
    assert adapted == {str(LAYERS - 1)} and top.block_names[-1].endswith(f"layers.{LAYERS - 1}")
    every = CausalLM(source=tiny, rank=2)
    assert sum(p.numel() for p in every.parameters() if p.requires_grad) == LAYERS * sum(
        p.numel() for p in top.parameters() if p.requires_grad)
    with pytest.raises(ConfigError, match=f"model.args.layers.*has {LAYERS} layers"):
        CausalLM(source=tiny, rank=2, layers=[LAYERS])


def test_layers_adapt_only_those_layers_of_a_sequence_classifier(tiny):
    """Its decoder names its layers "layers.3." without a prefix, where peft finds no layer
    index unless told the pattern: the Debian cls configs (layers 26-29) once failed to build."""
    from lora_fixtures import LAYERS

    from lightning_modules.sequence_classifier import SequenceClassifier

    top = SequenceClassifier(num_classes=3, source=tiny, rank=2, layers=[LAYERS - 1])
    adapted = {n.split("layers.")[1].split(".")[0] for n, p in top.named_parameters()
               if p.requires_grad and "lora_" in n}  # fmt: skip
    assert adapted == {str(LAYERS - 1)}
