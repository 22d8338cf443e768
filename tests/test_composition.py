"""Features compose: every {sync, async, exchange} x feature cell of docs/architecture.md's
table runs (and shows the feature acting) or is refused in one line naming both keys.

``TABLE`` is the table; ``test_the_docs_show_this_table`` keeps the docs equal to it. Runs
are tiny (600 digits, 6 clients, 2 rounds, the narrow FedAvgCNN: the cells are mechanics, not
the network's size) on the local executor unless the cell is Ray.
An asynchronous run stopped by a real SIGINT mid-run and resumed equals the uninterrupted
run to the bit.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
from pathlib import Path

import pytest
import torch
from helpers import NARROW_CNN, TINY_MNIST, refused_check, run_local_and_ray, untimed
from test_algorithm_contract import CHEAPER

from fedsim.checkpoint import latest_checkpoint, load_checkpoint
from fedsim.config import load_config
from fedsim.deployment.accountant import participation_epsilon
from fedsim.experiment import RunInterrupted, run_experiment
from fedsim.tracking.base import Sink

REPO = Path(__file__).resolve().parents[1]
BASE = [*TINY_MNIST[:1], "rounds=2", *TINY_MNIST[1:], *NARROW_CNN]
KINDS = {
    "sync": [],
    "async": [
        "asynchronous.enabled=true",
        "asynchronous.buffer_size=3",
        "system.speeds=slow_fraction:0.34,4",
    ],
    # SP-CACW with the contract tests' cheaper curvature estimate (a quarter of a run's time)
    "exchange": ["algorithm.name=spcacw", "algorithm.targets=[0,1]", *CHEAPER["spcacw"]],
    # synchronous rounds as deployed: some clients offline, some drop, over-selection and a
    # deadline the 4x slow clients miss (a client of ~80 samples takes ~80 s, a slow one 320)
    "deployed": [
        "join_ratio=0.67",
        "system.availability=0.9",
        "system.dropout=0.1",
        "system.overcommit=1.5",
        "system.speeds=slow_fraction:0.34,4",
        "system.deadline=200",
        "system.min_clients=3",
        "system.short_round=retry",
    ],
}
FEATURES = {
    "checkpoint": ["checkpoint_every=1"],
    "resume": ["checkpoint_every=1"],
    "DP local": ["privacy.mode=local", "privacy.clip_norm=1.0", "privacy.noise_multiplier=0.1"],
    "DP central": [
        "privacy.mode=central",
        "privacy.clip_norm=1.0",
        "privacy.noise_multiplier=0.1",
    ],
    "clipping": ["privacy.clip_norm=0.5"],
    "compression": ["compression.kind=topk", "compression.fraction=0.1"],
    "attacks": ["attack.kind=sign_flip", "attack.fraction=0.34"],
    "robust rules": ["aggregation.rule=multikrum", "aggregation.krum_f=0", "aggregation.krum_m=2"],
    "held-out clients": ["eval.holdout_clients=1", "checkpoint_every=1"],
    "after training": ["eval.when=after_training"],
    "Ray": [],
    "local": [],
}
NO_UPLOAD = "refused: SP-CACW uploads no model update, only gradients"
TABLE = {kind: {feature: "works" for feature in FEATURES} for kind in KINDS}
for _feature in ("DP local", "DP central", "clipping", "compression", "robust rules"):
    TABLE["exchange"][_feature] = NO_UPLOAD
TABLE["exchange"]["attacks"] = "refused: a peer's gradients are not an upload it could corrupt"
TABLE["exchange"]["held-out clients"] = "refused: SP-CACW serves only its targets"
TABLE["async"]["after training"] = "refused: a model version is evaluated apart from training"
TABLE["exchange"]["after training"] = "refused: no local training to evaluate after"
TABLE["deployed"]["DP central"] = "refused: who reports is not a uniform sample"
TABLE["deployed"]["after training"] = "refused: a client may train a model that is discarded"


def overrides(kind: str, feature: str) -> list[str]:
    return [*BASE, *KINDS[kind], *FEATURES[feature]]


def run(out: Path, *options: str, resume: bool = False):
    torch.set_num_threads(1)
    cfg = load_config(None, list(options))
    return run_experiment(cfg, out, progress=False, report=False, resume=resume)


def test_the_docs_show_this_table() -> None:
    """docs/architecture.md's composition table is ``TABLE``, cell for cell."""
    lines = (REPO / "docs" / "architecture.md").read_text().splitlines()
    start = lines.index("| kind | " + " | ".join(FEATURES) + " |")
    rows = {}
    for line in lines[start + 2 : start + 2 + len(TABLE)]:
        kind, *cells = [c.strip() for c in line.strip("|").split("|")]
        rows[kind] = dict(zip(FEATURES, cells, strict=True))
    assert rows == TABLE


CELLS = [(k, f) for k in TABLE for f in FEATURES if TABLE[k][f] == "works" and f != "Ray"]
# a resume cell runs three times (straight, stopped, resumed): `make test`, not the edit loop
SLOW_CELL = {"resume": pytest.mark.slow}


@pytest.mark.parametrize(
    ("kind", "feature"),
    [pytest.param(k, f, marks=SLOW_CELL.get(f, ()), id=f"{k}-{f}") for k, f in CELLS],
)
def test_cell_works(kind: str, feature: str, tmp_path: Path) -> None:
    options = overrides(kind, feature)
    if feature == "resume":
        straight = run(tmp_path / "straight", *options, "rounds=3")
        run(tmp_path / "resumed", *options)
        resumed = run(tmp_path / "resumed", *options, "rounds=3", resume=True)
        assert untimed(resumed.history) == untimed(straight.history)
        for key in straight.state:
            assert torch.equal(torch.as_tensor(straight.state[key]),
                               torch.as_tensor(resumed.state[key])), key  # fmt: skip
        same = ("clients.csv",)
        for name in same:
            assert (tmp_path / "resumed" / name).read_text() == (
                tmp_path / "straight" / name
            ).read_text()
        return
    result = run(tmp_path / "run", *options)
    assert result.summary["status"] == "completed"
    trained = result.history[0]
    if feature == "checkpoint":
        checkpoint = load_checkpoint(latest_checkpoint(tmp_path / "run"))
        assert checkpoint.rounds_trained == 2
        assert (checkpoint.round_kind is not None) == (kind in ("async", "deployed"))
    elif feature.startswith("DP"):
        assert all(math.isfinite(h["epsilon"]) and h["epsilon"] > 0 for h in result.history[:2])
        if kind == "async" and feature == "DP central":  # per participation, no amplification
            counts: dict[int, int] = {}
            for h in result.history[:2]:
                for client in h.get("robust_selected") or []:
                    counts[client] = counts.get(client, 0) + 1
            epsilon = result.history[1]["epsilon"]
            assert epsilon in [participation_epsilon(0.1, n, 1e-5) for n in (1, 2)]
    elif feature == "clipping":
        assert trained["clip_norm"] == 0.5 and 0 <= trained["clipped_fraction"] <= 1
    elif feature == "compression":
        dense = 4 * sum(p.numel() for p in [result.state["params"]])
        assert trained["bytes_up"] < 0.5 * dense * trained["num_trained"]
    elif feature == "attacks":
        assert trained["attackers"]
        with open(tmp_path / "run" / "clients.csv") as file:
            assert any(row["attacked"] == "True" for row in csv.DictReader(file))
    elif feature == "robust rules":
        assert len(trained["robust_selected"]) == 2
    elif feature == "held-out clients":  # evaluated as newcomers, and resumed to the bit
        assert all("unseen/acc_weighted" in h for h in result.history)
        resumed = run(tmp_path / "run", *options, "rounds=3", resume=True)
        straight = run(tmp_path / "straight", *options, "rounds=3")
        assert untimed(resumed.history) == untimed(straight.history)
    elif feature == "after training":
        assert trained["evaluated_after_training"] == trained["num_trained"] > 0


RAY_CELLS = [k for k in TABLE if TABLE[k]["Ray"] == "works"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", RAY_CELLS)
def test_ray_cell_equals_the_local_executor(kind: str, ray_pool) -> None:
    local, ray_run = run_local_and_ray(load_config(None, overrides(kind, "Ray")), ray_pool)
    assert untimed(ray_run.history) == untimed(local.history)


REFUSED = [(k, f) for k in TABLE for f in FEATURES if TABLE[k][f] != "works"]


@pytest.mark.parametrize(("kind", "feature"), REFUSED, ids=[f"{k}-{f}" for k, f in REFUSED])
def test_cell_is_refused_in_one_line_naming_both_keys(kind, feature, capsys, tmp_path) -> None:
    line = refused_check(" ".join([*KINDS[kind], *FEATURES[feature]]), capsys, tmp_path)
    kind_key = {"exchange": "algorithm.name=spcacw", "async": "asynchronous.enabled",
                "deployed": "system"}[kind]  # fmt: skip
    assert kind_key in line
    assert any(option.split("=")[0] in line for option in FEATURES[feature]), line


class StopAfter(Sink):
    """Sends this process a real SIGINT while round ``after`` is committed (Ctrl-C)."""

    def __init__(self, after: int) -> None:
        self.after = after

    def log_round(self, record) -> None:
        if record.round == self.after:
            os.kill(os.getpid(), signal.SIGINT)


def test_async_run_stopped_by_ctrl_c_resumes_to_the_bit(tmp_path: Path) -> None:
    """FedBuff with slow clients (some in flight across aggregations), a Ctrl-C in round 2:
    the checkpoint holds the clients in flight and the clock; resumed, metrics.jsonl (wall
    times aside), clients.csv and the final state equal the uninterrupted run's."""
    options = [*BASE, *KINDS["async"], "rounds=5", "checkpoint_every=100", "privacy.clip_norm=1"]
    straight = run(tmp_path / "straight", *options)
    cfg = load_config(None, options)
    with pytest.raises(RunInterrupted) as stopped:
        run_experiment(cfg, tmp_path / "resumed", progress=False, report=False,
                       extra_sinks=[StopAfter(2)])  # fmt: skip
    assert stopped.value.rounds_done == 3 and stopped.value.checkpoint is not None
    saved = load_checkpoint(stopped.value.checkpoint)
    assert saved.round_kind["schedule"]["in_flight"]  # clients were training when it stopped
    resumed = run(tmp_path / "resumed", *options, resume=True)

    def lines(run_dir: Path) -> list[dict]:
        text = (run_dir / "metrics.jsonl").read_text().splitlines()
        return untimed([json.loads(line) for line in text])

    assert lines(tmp_path / "resumed") == lines(tmp_path / "straight")
    assert len(lines(tmp_path / "resumed")) == 6
    for name in ("clients.csv",):
        assert (tmp_path / "resumed" / name).read_bytes() == (
            tmp_path / "straight" / name
        ).read_bytes()
    assert torch.equal(resumed.state["params"], straight.state["params"])
    assert resumed.summary == straight.summary
