"""``fedsim keys`` documents every config key, and the README / docs name only keys that exist.

The key list is generated from the config dataclasses and each algorithm's ``Params``
(fedsim/keys.py); these tests hold it complete (every leaf field, each with a description and
its declared range) and keep the prose from drifting away from it.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest
from helpers import stderr_lines

from fedsim.checks import field_check, field_schedulable
from fedsim.cli import main
from fedsim.config import AlgorithmConfig, ExperimentConfig
from fedsim.config.lr_schedule import OLD_KEYS
from fedsim.data.names import DATASET_NAMES
from fedsim.keys import algorithm_keys, algorithm_names, all_keys, experiment_keys
from fedsim.schedules import KEYS as SCHEDULE_KINDS
from lightning_modules.registry import MODEL_NAMES

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SECTIONS = (
    "data",
    "model",
    "client",
    "runtime",
    "tracking",
    "algorithm",
    "aggregation",
    "attack",
    "asynchronous",
    "privacy",
    "compression",
)
# a dotted key in prose: starts with a section, not part of a path or a module name
DOTTED_KEY = re.compile(
    rf"(?<![\w./:-])((?:{'|'.join(SECTIONS)})(?:\.[a-z_][a-z0-9_]*)+)(?![\w/(-])"
)
SCHEDULE_SETTINGS = {name for settings in SCHEDULE_KINDS.values() for name in settings}
BACKTICKED = re.compile(r"`([^`\n]+)`")


def leaf_fields(cls: type, prefix: str = "") -> list[tuple[str, type, str]]:
    """(dotted key, declaring dataclass, field name) of every leaf field of ``cls``."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += leaf_fields(hints[f.name], f"{prefix}{f.name}.")
        elif not (cls is AlgorithmConfig and f.name == "params"):
            out.append((f"{prefix}{f.name}", cls, f.name))
    return out


def run_keys(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(["keys", *argv])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


def known_keys() -> tuple[set[str], dict[str, set[str]]]:
    """Every experiment key, and per algorithm its ``algorithm.<key>`` names (without prefix)."""
    per_algorithm = {
        name: {k.key.removeprefix("algorithm.") for k in algorithm_keys(name)}
        for name in algorithm_names()
    }
    return {k.key for k in experiment_keys()}, per_algorithm


# ------------------------------------------------------------------ completeness


def test_every_experiment_field_is_listed_with_a_description_and_its_check() -> None:
    listed = {k.key: k for k in experiment_keys()}
    fields = leaf_fields(ExperimentConfig)
    assert [key for key, _, _ in fields] == list(listed)
    for key, cls, name in fields:
        assert listed[key].description, f"{key} has no description"
        check = field_check(cls, name)
        schedule = "; or a schedule over rounds" if field_schedulable(cls, name) else ""
        assert listed[key].allowed == (check[1] if check else "") + schedule, key


@pytest.mark.parametrize("algorithm", algorithm_names())
def test_every_algorithm_param_is_listed_with_a_description(algorithm: str) -> None:
    from fedsim.algorithms.registry import get_algorithm_class

    params = get_algorithm_class(algorithm).Params
    listed = {k.key: k for k in algorithm_keys(algorithm)}
    assert list(listed) == [f"algorithm.{key}" for key, _, _ in leaf_fields(params)]
    for key, doc in listed.items():
        assert doc.description, f"{algorithm}: {key} has no description"


def test_the_algorithms_the_readme_lists_are_registered() -> None:
    assert {
        "fedavg", "local", "cwfedavg", "fedper", "ditto", "fedamp", "fedfomo", "fedvg",
        "fedprox", "scaffold", "feddyn", "fedavgm",
    } <= set(algorithm_names())  # fmt: skip


def test_every_check_is_declared_on_a_field() -> None:
    """One mechanism: no key-table of checks beside the fields' own ``checked`` rules."""
    import fedsim.config as config

    assert not hasattr(config, "_CHECKS")
    assert field_check(config.ClientConfig, "lr") is not None
    assert field_check(config.WandbConfig, "tags") is not None
    first, second = config.WandbConfig(), config.WandbConfig()
    assert first.tags == [] and first.tags is not second.tags  # checked(..., factory=list)


# ------------------------------------------------------------------ the command


def test_keys_lists_every_experiment_key(capsys) -> None:
    code, out, err = run_keys(["experiment"], capsys)
    assert code == 0 and not err
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == [k.key for k in experiment_keys()]


def test_bare_keys_lists_the_names_a_config_picks(capsys) -> None:
    code, out, err = run_keys([], capsys)
    assert code == 0 and not err
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    assert set(algorithm_names()) | {"fedavg_cnn", "char_lstm", "mnist-5k", "shakespeare"} <= listed
    assert set(MODEL_NAMES) | set(DATASET_NAMES) <= listed  # every built-in name, summarised


def test_an_algorithms_summary_is_its_params_modules_first_line(capsys) -> None:
    """One place: the docstring of fedsim/algorithm_params/<name>.py (no table beside it)."""
    import fedsim.algorithm_params as params

    assert not hasattr(params, "SUMMARIES")
    code, out, _ = run_keys([], capsys)
    assert code == 0
    for name in algorithm_names():
        module = params.MODULES[name]
        assert module.__file__.endswith(f"algorithm_params/{name}.py")
        first = module.__doc__.splitlines()[0]
        assert params.summary(name) == first
        assert any(line.split()[:1] == [name] and line.endswith(first) for line in out.splitlines())


def test_fedavg_shows_its_own_keys_and_names_fedvgs_apart(capsys) -> None:
    code, out, _ = run_keys(["fedavg"], capsys)
    keys = [line.split()[0] for line in out.splitlines() if line.startswith("algorithm.")]
    assert "algorithm.server_optimizer" in keys and "algorithm.val_ratio" not in keys
    assert out.splitlines()[-1].startswith("(with algorithm.weighting=fedvg|avg: val_ratio")
    code, out, _ = run_keys(["fedvg"], capsys)
    assert "algorithm.val_ratio" in out and "(with" not in out


def test_keys_of_one_section(capsys) -> None:
    code, out, _ = run_keys(["runtime"], capsys)
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    assert names and all(n.startswith("runtime.") for n in names)
    assert "runtime.workers" in names and "runtime.executor" in names
    assert "allowed: auto, local, ray" in out


def test_keys_of_one_algorithm(capsys) -> None:
    code, out, _ = run_keys(["fedper"], capsys)
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    assert names == [k.key for k in algorithm_keys("fedper")]
    assert "algorithm.finetune_epochs" in names
    code, again, _ = run_keys(["algorithm.fedper"], capsys)
    assert code == 0 and again == out


def test_keys_markdown(capsys) -> None:
    code, out, _ = run_keys(["--markdown"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0] == "| key | type | default | allowed | what it is |"
    assert lines[1] == "|---|---|---|---|---|"
    assert len(lines) == 2 + len(experiment_keys())
    lr = (
        r"| `client.lr` | float \| null | `null` | must be > 0 (or null: the model's default); "
        "or a schedule over rounds |"
    )
    assert lr in out


def test_unknown_section_is_one_line_exit_2(capsys) -> None:
    code, out, err = run_keys(["nosuchsection"], capsys)
    assert code == 2 and not out
    lines = stderr_lines(err)
    assert len(lines) == 1, err
    assert "section='nosuchsection'" in lines[0] and "fedper" in lines[0]


def test_every_section_listed_in_all_keys_renders() -> None:
    sections = all_keys()
    assert set(sections) == {"experiment", *algorithm_names()}


# ------------------------------------------------------------------ the prose


def backticked(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in BACKTICKED.finditer(text)]


def test_every_dotted_key_the_docs_name_exists() -> None:
    experiment, per_algorithm = known_keys()
    any_algorithm = set().union(*per_algorithm.values()) | {"name"}
    sections = {k.rsplit(".", 1)[0] for k in experiment if "." in k}
    sections |= {s.split(".")[0] for s in sections}
    bad = []
    for path in DOCS:
        for line, span in backticked(path):
            for key in DOTTED_KEY.findall(span):
                base, _, setting = key.rpartition(".")
                if setting in SCHEDULE_SETTINGS and base.count("."):
                    key = base  # a schedule's setting (algorithm.mu.decay: fedsim/schedules.py)
                if key in OLD_KEYS:  # deprecated, still read (as a schedule on client.lr)
                    continue
                if key.startswith("algorithm."):
                    ok = key.removeprefix("algorithm.") in any_algorithm
                else:  # model.args holds the constructor's own names
                    ok = key in experiment or key in sections or key.startswith("model.args.")
                if not ok:
                    bad.append(f"{path.relative_to(REPO)}:{line}: `{key}`")
    assert not bad, "keys named in the docs that do not exist:\n" + "\n".join(bad)


def markdown_rows(text: str, header_start: str) -> list[tuple[str, list[str]]]:
    """(section heading, cells) of each body row of every table whose header starts so."""
    rows, heading, in_table = [], "", False
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if not line.startswith("|"):
            in_table = False
            continue
        if line.startswith(header_start):
            in_table = True
            continue
        if in_table and not line.startswith("|---"):
            rows.append((heading, [c.strip() for c in line.strip().strip("|").split(" | ")]))
    return rows


def ticked(cell: str) -> list[str]:
    return BACKTICKED.findall(cell)


def test_algorithms_doc_key_tables_match_the_params() -> None:
    _, per_algorithm = known_keys()
    text = (REPO / "docs" / "algorithms.md").read_text(encoding="utf-8")
    any_algorithm = set().union(*per_algorithm.values())
    bad = []
    for heading, cells in markdown_rows(text, "| key |"):
        for key in ticked(cells[0]):  # prose rows ("FedAvg-family keys") name none
            if key not in per_algorithm.get(heading, any_algorithm):
                bad.append(f"## {heading}: `{key}`")
    for _, cells in markdown_rows(text, "| `algorithm.name` | `weighting` default |"):
        (name,) = ticked(cells[0])
        bad += [f"{name}: `{k}`" for k in ticked(cells[-1]) if k not in per_algorithm[name]]
    assert not bad, "docs/algorithms.md names keys that do not exist:\n" + "\n".join(bad)


def test_every_algorithm_key_is_documented() -> None:
    """The other direction: each algorithm's every key appears in docs/algorithms.md."""
    _, per_algorithm = known_keys()
    text = (REPO / "docs" / "algorithms.md").read_text(encoding="utf-8")
    documented = set(BACKTICKED.findall(text))
    missing = sorted(
        f"{name}: {key}" for name, own in per_algorithm.items() for key in own - documented
    )
    assert not missing, "algorithm keys missing from docs/algorithms.md:\n" + "\n".join(missing)
