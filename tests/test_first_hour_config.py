"""Issue 56, a newcomer's config and command line: a subclass's errors name it (point 5), the
search parser reads numbers as a config does (point 17)."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.search.space import Space, parse_space


def test_5_a_subclass_of_fedprox_is_refused_with_its_own_name(tmp_path, monkeypatch):
    (tmp_path / "my_algos_56.py").write_text(
        textwrap.dedent("""
        from fedsim.algorithms.fedprox import FedProx

        class DecayProx(FedProx):
            pass
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as err:
        load_config(None, ["algorithm.name=my_algos_56:DecayProx"])
    assert "required for my_algos_56:DecayProx" in str(err.value)
    with pytest.raises(ConfigError, match="required for fedprox"):  # the built-in keeps its own
        load_config(None, ["algorithm.name=fedprox"])
    sys.modules.pop("my_algos_56", None)


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("client.lr=loguniform(1e-3,0.1)", (1e-3, 0.1)),
        ("client.lr=uniform(1E-4, 5e-2)", (1e-4, 5e-2)),
        ("client.lr=choice(1e-3,3e-3)", (1e-3, 3e-3)),
    ],
)
def test_17_exponent_numbers_are_numbers_in_a_search(text, args):
    space = parse_space(text)
    assert space == Space("client.lr", space.kind, args)
    assert all(isinstance(a, float) for a in space.args)


# --- point 1: switching a choice on the command line replaces its group ----------------------

README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_fedper(tmp_path: Path) -> tuple[Path, list[str]]:
    """The README's fedper.yaml, and the overrides of its "any key can be changed" example."""
    from tests.docs_snippets import blocks

    block = next(b for b in blocks(README) if b.title == "fedper.yaml")
    path = tmp_path / "fedper.yaml"
    path.write_text(block.text)
    example = re.search(r"`fedsim run fedper\.yaml ([^`]+)`", README.read_text()).group(1)
    return path, example.split()


def test_1_the_readmes_algorithm_switch_runs_as_written(tmp_path, capsys):
    path, overrides = _readme_fedper(tmp_path)
    assert overrides == ["algorithm.name=ditto"]
    cfg = load_config(path, overrides)
    assert cfg.algorithm.name == "ditto" and cfg.data.partition.alpha == 0.1
    note = capsys.readouterr().err
    assert note.count("\n") == 1 and "algorithm.personal_layers=1 is dropped" in note


def test_1_keys_for_the_new_choice_on_the_command_line_apply(tmp_path, capsys):
    path, _ = _readme_fedper(tmp_path)
    cfg = load_config(path, ["algorithm.name=ditto", "algorithm.mu=0.5"])
    assert cfg.algorithm.params.mu == 0.5
    capsys.readouterr()
    cfg = load_config(path, ["algorithm.name=fedper", "algorithm.personal_layers=2"])
    assert cfg.algorithm.params.personal_layers == 2
    assert "dropped" not in capsys.readouterr().err  # the same choice drops nothing


@pytest.mark.parametrize(
    ("yaml_text", "switch", "dropped"),
    [
        ("data:\n  partition: {name: pathological, classes_per_client: 3}\n",
         "data.partition.name=iid", "data.partition.classes_per_client=3"),
        ("model: {name: mlp, hidden: [16]}\n", "model.name=fedavg_cnn", "model.hidden=[16]"),
        ("compression: {kind: topk, fraction: 0.1}\n", "compression.kind=none",
         "compression.fraction=0.1"),
        ("client: {optimizer: sgd, momentum: 0.9}\n", "client.optimizer=adam",
         "client.momentum=0.9"),
    ],
)  # fmt: skip
def test_1_every_choice_drops_the_previous_choices_keys(tmp_path, capsys, yaml_text, switch,
                                                       dropped):  # fmt: skip
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    load_config(path, [switch])  # refused before: the dropped key acts only with the old choice
    assert f"{dropped} is dropped" in capsys.readouterr().err


def test_1_an_unknown_algorithm_key_names_the_algorithm_it_belongs_to(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("algorithm: {name: ditto, personal_layers: 1}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert "unknown key: a key of fedper" in text and "not of ditto" in text
    assert "personal_epochs?" not in text  # no "did you mean" among ditto's keys


def test_6_the_summary_table_is_whole_at_80_columns():
    import io

    from rich.console import Console

    from fedsim.cli import EXTRA_COLUMNS, SUMMARY_COLUMNS, summary_table

    row = {k: 0.123456 + i for i, k in enumerate((*SUMMARY_COLUMNS, *EXTRA_COLUMNS))}
    summary = {"best": {"round": 17, **row}, "final": {"round": 20, **row}}
    out = io.StringIO()
    Console(file=out, width=80).print(summary_table(summary, "holdout: ditto on mnist-5k"))
    text = out.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    for i, key in enumerate((*SUMMARY_COLUMNS, *EXTRA_COLUMNS)):
        assert key in text and f"{0.123456 + i:.4f}" in text


def test_19_pfllibs_ditto_curve_is_its_personalized_evaluations():
    from benchmarks.pfllib_reference.run_pfllib import curves

    personal = [0.1 + 0.04 * r for r in range(21)]  # rises to 0.9
    global_ = [0.5 + 0.4 * (r == 17) for r in range(21)]  # one high global round
    interleaved = [v for pair in zip(global_, personal, strict=True) for v in pair]
    record = curves("Ditto", interleaved)
    assert record["acc"] == personal and record["global_acc"] == global_
    assert record["final"] == personal[-1] and record["best_round"] == 20
    assert record["n_evals"] == 42 and "extra_evals_after_training" not in record
    fedrep = curves("FedRep", personal)  # one evaluation a round: read as it is
    assert fedrep["acc"] == personal and "global_acc" not in fedrep


def test_8_the_notebooks_curves_group_seeds_per_method(tmp_path):
    import json
    from types import SimpleNamespace

    from fedsim.tracking.run_groups import method_groups

    def run(name, algorithm, seed, alpha=0.1):
        config = {"name": name, "seed": seed, "algorithm": {"name": algorithm},
                  "data": {"partition": {"alpha": alpha}}}  # fmt: skip
        return SimpleNamespace(config=config, run_dir=tmp_path / f"{name}-{seed}")

    runs = [run("ditto", "ditto", s) for s in (0, 1, 2)] + [run("fp", "fedper", 0),
            run("fp-iid", "fedper", 0, alpha=1.0)]  # fmt: skip
    groups = method_groups(runs)
    assert [g.label for g in groups] == [  # two settings of a method: by what differs
        "ditto, seeds 0, 1, 2", "fedper (data.partition.alpha=0.1), seed 0",
        "fedper (data.partition.alpha=1.0), seed 0",
    ]  # fmt: skip
    from fedsim.tracking.run_groups import setting_labels

    configs = [{"seed": 0, "client": {"lr": 0.05, "epochs": 1}, "algorithm": {"name": "a"}},
               {"seed": 1, "client": {"lr": 0.005, "epochs": 1}, "algorithm": {"name": "b"}}]
    assert setting_labels(configs) == ["algorithm.name=a, client.lr=0.05",
                                       "algorithm.name=b, client.lr=0.005"]  # fmt: skip
    assert [len(g.runs) for g in groups] == [3, 1, 1] and [g.color for g in groups] == [0, 1, 2]
    notebook = json.loads((README.parent / "notebooks" / "analysis.ipynb").read_text())
    sources = ["".join(c["source"]) for c in notebook["cells"]]
    curves = next(s for s in sources if "acc_worst10" in s and "plt.subplots(" in s)
    assert "method_groups(runs)" in curves and "label=run.label" not in curves


def test_4_flwr_datasets_is_installed_without_downgrading_datasets_or_rich():
    """make setup installs flwr-datasets with --no-deps (its pins would downgrade datasets,
    huggingface-hub and rich); its partitioners' tests then run, not skip."""
    import tomllib
    from importlib import metadata

    root = README.parent
    makefile = (root / "Makefile").read_text()
    assert re.search(r"--no-deps flwr-datasets==0\.6\.1", makefile)
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extras = extras["optional-dependencies"]
    assert not any("flwr-datasets" in dep for deps in extras.values() for dep in deps)
    import importlib.util

    assert importlib.util.find_spec("flwr_datasets") is not None  # its tests import it

    assert int(metadata.version("datasets").split(".")[0]) >= 5  # flwr-datasets wants < 5
    assert int(metadata.version("rich").split(".")[0]) >= 15  # and < 15
    assert int(metadata.version("huggingface-hub").split(".")[0]) >= 2


# --- point 7: clients named as the data names them --------------------------------------------

NATURAL_PARTITION = {
    "partition": {"name": "natural", "by": "hospital", "clients": [
        {"client": 0, "hospital": "st-mary", "samples": 9},
        {"client": 1, "hospital": "charite", "samples": 7},
    ]},
    "clients": [{"client": 0, "train_class_counts": [3, 4]},
                {"client": 1, "train_class_counts": [5, 0]}],
}  # fmt: skip


def test_7_client_names_come_from_the_data_and_survive_hold_out():
    from fedsim.data.holdout import reorder_records
    from fedsim.tracking.client_names import client_names

    assert client_names(NATURAL_PARTITION) == {0: "st-mary", 1: "charite"}
    # held-out: run ids close up, but the name is the client's id as drawn, as without it
    order = [0, 2, 3, 1]  # client 1 held out: run id 3
    held = {"partition": {"name": "iid", "holdout": {"partition_ids": order, "held_out": 1}}}
    assert client_names(held) == {0: "0", 1: "2", 2: "3", 3: "1"}
    assert client_names({"partition": {"name": "iid"}}) == {}  # ids are the names
    natural_held = {"partition": reorder_records(NATURAL_PARTITION["partition"], [1, 0])}
    assert client_names(natural_held) == {0: "charite", 1: "st-mary"}


def test_7_clients_csv_and_the_label_plot_carry_the_names(tmp_path):
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedsim.tracking.base import ClientRow, RoundRecord
    from fedsim.tracking.files import FileSink
    from fedsim.tracking.label_plot import plot_label_distribution

    sink = FileSink()
    sink.start(tmp_path, {"eval": {}}, NATURAL_PARTITION)
    rows = [ClientRow(client=c, round=0, accuracy=0.5, loss=1.0, n=4, classes=2) for c in (1, 0)]
    sink.log_round(RoundRecord(0, {"acc_weighted": 0.5}, rows))
    sink.close()
    with open(tmp_path / "clients.csv", newline="") as handle:
        written = list(csv.DictReader(handle))
    assert [(r["client"], r["client_name"]) for r in written] == [
        ("1", "charite"),
        ("0", "st-mary"),
    ]
    fig = plot_label_distribution(plt, NATURAL_PARTITION, "run")
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["st-mary", "charite"]
    plt.close(fig)


def test_7_wandb_gets_a_client_name_column_and_named_lines(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from fedsim.config import WandbConfig
    from fedsim.tracking.base import ClientRow, RoundRecord
    from fedsim.tracking.wandb_sink import WandbSink

    class Table:
        def __init__(self, columns, data=None, log_mode=None):
            self.columns, self.data = columns, list(data or [])

        def add_data(self, *row):
            self.data.append(list(row))

    logged, lines = [], []
    fake = SimpleNamespace(
        Table=Table, Histogram=lambda values, num_bins: values,
        plot=SimpleNamespace(line_series=lambda **kw: lines.append(kw["keys"])),
    )  # fmt: skip
    monkeypatch.setenv("WANDB_MODE", "disabled")
    sink = WandbSink(WandbConfig(enabled=True))
    sink.start(tmp_path, {}, NATURAL_PARTITION)  # disabled: no W&B run; the names are read
    sink._wandb, sink.run = fake, SimpleNamespace(log=lambda data, step: logged.append(data))
    rows = [ClientRow(client=c, round=1, accuracy=0.5, loss=1.0, n=4, classes=2) for c in (0, 1)]
    sink.log_round(RoundRecord(1, {"acc_weighted": 0.5}, rows))
    table = logged[-1]["clients/table"]
    assert table.columns[-1] == "client_name" and [r[-1] for r in table.data] == [
        "st-mary", "charite"
    ]  # fmt: skip
    assert lines and lines[0] == ["client st-mary", "client charite"]
