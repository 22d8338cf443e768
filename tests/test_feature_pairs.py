"""Every pair of features a user may combine works or is refused in one line naming both.

``SWITCHES`` turn one feature on each (an algorithm, an asynchronous run, DP, compression,
an attack, a robust rule, a partition, Shakespeare's plays, checkpoints...); every algorithm
is a switch too, so every algorithm meets every feature. Each switch alone must validate
(``fedsim run --check``: exit 0) unless it is listed as refused alone (a key that acts only
with another); for every pair, the check either passes or exits 2 with one line that names a
key of each switch: never a traceback, a hang, or a key silently ignored. The generated
table is docs/deployment.md's pair list in executable form.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from helpers import NARROW_CNN, invoke_cli, stderr_lines
from lora_fixtures import ADAPTER_ONLY

from fedsim.algorithm_params import BUILTIN_NAMES, example

REPO = Path(__file__).resolve().parents[1]
# the narrow FedAvgCNN (FedBN's too): --check builds the model, a third of a check's time
BASE = ["runtime.executor=local", "data.num_clients=8", "data.max_samples=400", "rounds=1",
        *NARROW_CNN]  # fmt: skip

FEATURES: dict[str, list[str]] = {
    "async": ["asynchronous.enabled=true", "asynchronous.buffer_size=4"],
    "async-dropout": ["asynchronous.enabled=true", "system.dropout=0.2"],
    "speeds": ["system.speeds=slow_fraction:0.5,2"],
    "sync-dropout": ["system.dropout=0.2", "system.short_round=retry"],
    # synchronous rounds as deployed (min_clients spelled out: a robust rule's minimum is
    # checked against it, and the refusal names it)
    "deployed": ["system.availability=0.9", "system.overcommit=1.5", "system.min_clients=1"],
    "checkpoint": ["checkpoint_every=1"],
    "dp-local": ["privacy.mode=local", "privacy.clip_norm=1"],
    "dp-central": ["privacy.mode=central", "privacy.clip_norm=1"],
    "dp-fixed": ["privacy.mode=fixed_sigma", "privacy.sigma=0.05"],
    "clipping": ["privacy.clip_norm=1"],
    "adaptive-clip": ["privacy.clip_norm=1", "privacy.adaptive=true"],
    "topk": ["compression.kind=topk", "compression.fraction=0.1"],
    "threshold-ef": ["compression.kind=threshold", "compression.error_feedback=true"],
    "sign-flip": ["attack.kind=sign_flip"],
    "label-flip": ["attack.kind=label_flip"],
    "median": ["aggregation.rule=median"],
    "krum": ["aggregation.rule=krum"],
    "anomaly": ["aggregation.anomaly_cosine=0.5"],
    "half-cohort": ["join_ratio=0.5"],
    "relabel": ["data.partition.name=relabel"],
    "rotation-clusters": ["data.partition.name=rotation", "data.partition.clusters=2"],
    "pathological": ["data.partition.name=pathological"],
    "plays": ["data.plays=2"],
    "trim-alone": ["aggregation.trim=0.2"],
    "ray": ["runtime.executor=ray"],
    "holdout": ["eval.holdout_clients=1"],
    "eval-both": ["eval.model=both"],
    "after-training": ["eval.when=after_training"],
}
# each algorithm's example (its own declaration), but a partition: the pairs vary that themselves;
# the adapter-only ones would load SmolLM2 for every pair (their own tests cover them)
NAMES = [name for name in BUILTIN_NAMES if name not in ADAPTER_ONLY]
REQUIRED = {
    name: [o for o in example(name) if not o.startswith("data.partition.")] for name in NAMES
}
ALGORITHMS = {f"alg-{name}": [f"algorithm.name={name}", *REQUIRED.get(name, [])] for name in NAMES}
SWITCHES = {**FEATURES, **ALGORITHMS}
# refused on their own (a key that needs another, data only some datasets have)
REFUSED_ALONE = {
    "trim-alone": "aggregation.rule",
    "plays": "data.plays",
    "alg-oracle": "data.partition.name",
}


def check(tmp_path: Path, capsys, overrides: list[str]) -> tuple[int, str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    config = str(REPO / "configs" / "quickstart.yaml")
    runtime = [o for o in overrides if o.startswith("runtime.executor=")]
    base = [o for o in BASE if not (runtime and o.startswith("runtime.executor="))]
    return invoke_cli(["run", config, "--check", *base, *overrides], capsys, work)


def keys(switch: str) -> set[str]:
    return {o.split("=")[0] for o in SWITCHES[switch]}


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_each_switch_alone(switch, tmp_path, capsys):
    code, err = check(tmp_path, capsys, SWITCHES[switch])
    lines = stderr_lines(err)
    if switch in REFUSED_ALONE:
        assert code == 2 and len(lines) == 1 and REFUSED_ALONE[switch] in lines[0], err
    else:
        assert code == 0, err


PAIRS = [
    (a, b)
    for a, b in itertools.combinations(sorted(SWITCHES), 2)
    if a not in REFUSED_ALONE
    and b not in REFUSED_ALONE
    and not (a.startswith("alg-") and b.startswith("alg-"))  # one algorithm per run
]


@pytest.mark.slow
def test_every_pair_works_or_is_refused_naming_both(tmp_path, capsys):
    """~500 pairs, one --check each (the dataset is loaded once per process)."""
    problems = []
    for a, b in PAIRS:
        both = SWITCHES[a] + [o for o in SWITCHES[b] if o not in SWITCHES[a]]
        code, err = check(tmp_path, capsys, both)
        lines = stderr_lines(err)
        if code == 0:
            continue
        if code != 2 or len(lines) != 1 or "Traceback" in err:
            problems.append(f"{a} + {b}: exit {code}: {err.strip()[:300]}")
        elif not (any(k in lines[0] for k in keys(a)) and any(k in lines[0] for k in keys(b))):
            problems.append(f"{a} + {b}: does not name both: {lines[0]}")
    assert not problems, f"{len(problems)} of {len(PAIRS)} pairs:\n" + "\n".join(problems)
