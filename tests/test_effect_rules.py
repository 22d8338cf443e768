"""Keys that act only with another (``fedsim/config/effects.py``), rule by rule.

For every rule in ``DEPENDENT``: the key set alone (its enabler off) is refused in one line
naming both keys; with its enabler on it is accepted; and the key spelled out at its default
is accepted with the enabler off (a default value is never refused). ``CASES`` gives each
rule a value and its enabler's on/off settings; a rule added to ``DEPENDENT`` without a case
fails ``test_every_rule_has_a_case``. Separately, every key ``fedsim keys`` lists, each
algorithm's included, written out at its default alone, validates.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedsim.algorithm_params import example
from fedsim.config import load_config
from fedsim.config.effects import DEPENDENT
from fedsim.errors import ConfigError
from fedsim.keys import algorithm_keys, algorithm_names, experiment_keys

HF = "data.name=hf:{hf}"  # a small CSV table written per test (tests/hf_fixtures.py)
ASYNC_ON, ASYNC_OFF = ["asynchronous.enabled=true"], ["asynchronous.enabled=false"]
WANDB_ON, WANDB_OFF = ["tracking.wandb.enabled=true"], ["tracking.wandb.enabled=false"]
DP_LOCAL = ["privacy.mode=local", "privacy.clip_norm=1"]
# (key, enabler) -> (a valid non-default value, overrides that enable it, ones that do not)
CASES: dict[tuple[str, str], tuple[str, list[str], list[str]]] = {
    ("eval.finetune_epochs", "eval.holdout_clients"): ("2", ["eval.holdout_clients=2"], []),
    ("aggregation.trim", "aggregation.rule"): (
        "0.2", ["aggregation.rule=trimmed_mean"], ["aggregation.rule=median"]),
    ("aggregation.krum_f", "aggregation.rule"): (
        "2", ["aggregation.rule=krum"], ["aggregation.rule=median"]),
    ("aggregation.krum_m", "aggregation.rule"): (
        "3", ["aggregation.rule=multikrum"], ["aggregation.rule=krum"]),
    ("attack.fraction", "attack.kind"): ("0.3", ["attack.kind=sign_flip"], []),
    ("attack.start_round", "attack.kind"): ("1", ["attack.kind=sign_flip"], []),
    ("attack.factor", "attack.kind"): (
        "3", ["attack.kind=scale"], ["attack.kind=label_flip"]),
    ("privacy.noise_multiplier", "privacy.mode"): (
        "0.5", DP_LOCAL, ["privacy.mode=fixed_sigma"]),
    ("privacy.sigma", "privacy.mode"): ("0.2", ["privacy.mode=fixed_sigma"], DP_LOCAL),
    ("privacy.delta", "privacy.mode"): ("1.0e-06", DP_LOCAL, []),
    ("privacy.target_quantile", "privacy.adaptive"): (
        "0.3", ["privacy.clip_norm=1", "privacy.adaptive=true"], ["privacy.clip_norm=1"]),
    ("compression.threshold", "compression.kind"): (
        "0.05", ["compression.kind=threshold"], ["compression.kind=topk"]),
    ("compression.fraction", "compression.kind"): (
        "0.2", ["compression.kind=topk"], ["compression.kind=threshold"]),
    ("compression.error_feedback", "compression.kind"): (
        "true", ["compression.kind=topk"], []),
    ("asynchronous.buffer_size", "asynchronous.enabled"): ("2", ASYNC_ON, ASYNC_OFF),
    ("asynchronous.concurrency", "asynchronous.enabled"): ("4", ASYNC_ON, ASYNC_OFF),
    ("asynchronous.max_staleness", "asynchronous.enabled"): ("10", ASYNC_ON, ASYNC_OFF),
    ("asynchronous.stale", "asynchronous.enabled"): ("drop", ASYNC_ON, ASYNC_OFF),
    ("asynchronous.staleness_discount", "asynchronous.enabled"): (
        "constant", ASYNC_ON, ASYNC_OFF),
    ("asynchronous.staleness_exponent", "asynchronous.enabled"): ("1.5", ASYNC_ON, ASYNC_OFF),
    ("asynchronous.staleness_exponent", "asynchronous.staleness_discount"): (
        "1.5", ASYNC_ON, [*ASYNC_ON, "asynchronous.staleness_discount=constant"]),
    ("data.partition.classes_per_client", "data.partition"): (
        "3", ["data.partition.name=pathological"], ["data.partition.name=iid"]),
    ("data.partition.alpha", "data.partition"): (
        "0.3", ["data.partition.name=dirichlet"], ["data.partition.name=pathological"]),
    ("data.partition.clusters", "data.partition.name"): (
        "3", ["data.partition.name=relabel"], ["data.partition.name=iid"]),
    ("data.partition.step", "data.partition.name"): (
        "10", ["data.partition.name=rotation"], ["data.partition.name=relabel"]),
    ("data.partition.base", "data.partition.name"): (
        "pathological", ["data.partition.name=relabel"], ["data.partition.name=iid"]),
    ("data.partition.sigma", "data.partition.name"): (
        "0.5", ["data.partition.name=clustered"], ["data.partition.name=iid"]),
    ("data.partition.name", "data"): (
        "pathological", ["data.name=mnist-5k"], ["data.name=shakespeare"]),
    ("data.partition.by", "data.partition.name"): (
        "group", [HF, "data.partition.name=natural"], [HF, "data.partition.name=iid"]),
    ("data.partition.values", "data.partition.name"): (
        "[a*]", [HF, "data.partition.name=natural", "data.partition.by=group"],
        [HF, "data.partition.name=iid"]),
    ("eval.holdout_names", "eval.holdout_clients"): ("[a*]", [], ["eval.holdout_clients=2"]),
    ("data.partition.args", "data.partition.name"): (
        "{alpha: 0.5}", ["data.partition.name=flwr:DirichletPartitioner"],
        ["data.partition.name=iid"]),
    ("data.test_split", "data.partition.name"): (
        "test", [HF, "data.partition.name=natural", "data.partition.by=group"],
        [HF, "data.partition.name=iid"]),
    ("data.train_ratio", "data.test_split"): (
        "0.5", [], [HF, "data.partition.name=natural", "data.partition.by=group",
                    "data.test_split=test"]),
    ("data.split", "data.name"): ("test", [HF], ["data.name=mnist-5k"]),
    ("data.input_column", "data.name"): ("pixels", [HF], ["data.name=mnist-5k"]),
    ("data.label_column", "data.name"): ("target", [HF], ["data.name=mnist-5k"]),
    ("data.resize", "data.name"): ("16", [HF], ["data.name=mnist-5k"]),
    ("data.resize", "model.name"): ("16", [HF], [HF, "model.name=causal_lm"]),
    ("data.prompt_column", "data.name"): ("question", [HF], ["data.name=mnist-5k"]),
    ("data.response_column", "data.name"): ("answer", [HF], ["data.name=mnist-5k"]),
    **{
        (f"data.{key}", "data"): (value, ["data.name=shakespeare-lm"], ["data.name=mnist-5k"])
        for key, value in (("tokenizer", "smollm2"), ("max_length", "64"), ("packing", "false"))
    },
    ("client.betas", "client.optimizer"): (
        "[0.8, 0.99]", ["client.optimizer=adam"], ["client.optimizer=sgd"]),
    ("client.momentum", "client.optimizer"): (
        "0.9", ["client.optimizer=sgd"], ["client.optimizer=adam"]),
    ("client.nesterov", "client.momentum"): (
        "true", ["client.momentum=0.9"], ["client.momentum=0"]),
    ("client.epochs", "client.steps"): ("2", [], ["client.steps=3"]),
    ("client.epochs_by_client", "client.steps"): ("[1, 2]", [], ["client.steps=3"]),
    **{
        (f"system.{key}", "system.device_trace"): (
            value, ["system.upload_bandwidth=1000"] if key == "network_speeds" else [],
            ["system.device_trace=dev.csv"])
        for key, value in (("speeds", "uniform:1,2"), ("time_per_sample", "0.01"),
                           ("upload_bandwidth", "1000"), ("download_bandwidth", "1000"),
                           ("network_speeds", "uniform:1,2"))
    },
    ("system.network_speeds", "system"): ("uniform:1,2", ["system.upload_bandwidth=1000"], []),
    ("system.availability", "system.availability_trace"): (
        "0.5", [], ["system.availability_trace=on.csv"]),
    **{
        (f"system.{key}", "asynchronous.enabled"): (
            value, ["system.dropout=0.1"] if key in ("min_clients", "short_round") else [],
            ASYNC_ON)
        for key, value in (("overcommit", "1.5"), ("deadline", "100"), ("min_clients", "2"),
                           ("short_round", "retry"))
    },
    **{
        (f"system.{key}", "system"): (value, ["system.dropout=0.1"], ["system.speeds=constant"])
        for key, value in (("min_clients", "2"), ("short_round", "retry"))
    },
    **{
        (f"tracking.wandb.{key}", "tracking.wandb.enabled"): (value, WANDB_ON, WANDB_OFF)
        for key, value in (("project", "lab"), ("entity", "team"), ("group", "g"),
                           ("tags", "[a, b]"), ("mode", "offline"),
                           ("max_client_series", "5"), ("params", "{arm: x}"))
    },  # fmt: skip
}  # fmt: skip
RULES = [(key, enabler) for key, enabler, _, _ in DEPENDENT]


def test_every_rule_has_a_case():
    assert sorted(set(RULES) - set(CASES)) == []  # a new rule in effects.py needs a case here
    assert sorted(set(CASES) - set(RULES)) == []  # a case whose rule is gone
    assert len(RULES) == len(set(RULES))


def where(enabler: str) -> str:
    """What a refusal names for ``enabler``: a key, a section by its ``.name``, or (a rule
    over several keys of one section) the section's keys, the first of them."""
    if enabler == "system":
        return "system."
    return f"{enabler}.name=" if enabler in ("data", "data.partition") else f"{enabler}="


@pytest.fixture
def hf_table(tmp_path: Path) -> str:
    from hf_fixtures import save_tabular_csv

    return str(save_tabular_csv(tmp_path / "table.csv"))


def build(overrides: list[str], hf: str) -> list[str]:
    return [o.replace("{hf}", hf) for o in overrides]


@pytest.mark.parametrize(("key", "enabler"), RULES, ids=[f"{k}<-{e}" for k, e in RULES])
def test_refused_alone_accepted_with_its_enabler_and_at_its_default(key, enabler, hf_table):
    value, on, off = CASES[key, enabler]
    default = next(k.default for k in experiment_keys() if k.key == key)
    assert yaml.safe_load(value) != default, "the case's value must not be the default"
    with pytest.raises(ConfigError) as refused:
        load_config(None, build([*off, f"{key}={value}"], hf_table))
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{key}=")
    assert f"acts only with {where(enabler)}" in line, line
    load_config(None, build([*on, f"{key}={value}"], hf_table))  # acts: accepted
    load_config(None, build([*off, f"{key}={spelled(default)}"], hf_table))  # never refused


def spelled(value: object) -> str:
    """``value`` as a command-line override writes it (YAML flow style)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


EXPERIMENT_DEFAULTS = [k for k in experiment_keys() if not k.key.startswith("algorithm.")]


@pytest.mark.parametrize("doc", EXPERIMENT_DEFAULTS, ids=lambda k: k.key)
def test_every_key_at_its_default_alone_validates(doc):
    load_config(None, [f"{doc.key}={spelled(doc.default)}"])


ALGORITHM_DEFAULTS = [(n, k) for n in algorithm_names() for k in algorithm_keys(n)]
# keys with no default (null: unset), which an algorithm requires, and what else it needs
REQUIRED_KEYS = {("fedprox", "algorithm.mu")}
NEEDS = {name: example(name) for name in algorithm_names()}  # each algorithm's own declaration


@pytest.mark.parametrize(
    ("name", "doc"), ALGORITHM_DEFAULTS, ids=[f"{n}:{k.key}" for n, k in ALGORITHM_DEFAULTS]
)
def test_every_algorithm_key_at_its_default_validates(name, doc):
    """Each algorithm's keys at their defaults; a required key's null is refused (it has no
    default: the message says to set it)."""
    needs = [o for o in NEEDS.get(name, []) if not o.startswith(f"{doc.key}=")]
    overrides = [f"algorithm.name={name}", *needs, f"{doc.key}={spelled(doc.default)}"]
    if (name, doc.key) in REQUIRED_KEYS:
        with pytest.raises(ConfigError, match=f"{doc.key}=null: required for {name}"):
            load_config(None, overrides)
    else:
        load_config(None, overrides)
