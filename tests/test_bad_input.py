"""Bad input never escapes as a traceback: every invocation validates (exit 0) or exits 2 with
exactly one line on stderr, and creates no file or folder.

Property-based (hypothesis): generated overrides (wrong types, non-finite numbers, broken
YAML, unicode, paths) and generated config files, each checked with ``fedsim run --check``
(validate and build the federation, the model and the algorithm; no run folder, no training).
The invocations a user actually tried (issue 13) are listed one by one first.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from helpers import invoke_cli as invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedsim.keys import all_keys

BASE = ["runtime.executor=local", "data.num_clients=4", "rounds=1"]


def assert_clean(code: int, err: str, argv: list[str]) -> None:
    assert code in (0, 2), f"{argv}: exit {code}\n{err}"
    assert "Traceback" not in err, f"{argv}: traceback\n{err}"
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, f"{argv}: {len(lines)} lines on stderr\n{err}"


TRIED = [
    "name=@exp",
    "name=*x",
    "tracking.wandb.tags=[a,b",
    "rounds=\x07",
    "rounds=\udcff",  # a 0xff byte on the command line, as Python decodes argv
    "client.lr=.inf",
    "client.lr=.nan",
    "data.partition.alpha=.inf",
    "name=../../escape",
    "name=",
    "runtime.device=cuda:7",
    "algorithm.name=nope",
    "model.name=no.such.module:Net",
    "data.name=os:getcwd",
]


@pytest.mark.parametrize("override", TRIED)
def test_each_tried_bad_override_is_one_line_exit_2(override, capsys, tmp_path):
    argv = ["run", "--check", "--no-progress", "-", *BASE, override]
    argv.remove("-")
    argv.insert(1, str(_write_config(tmp_path / "cfg", {})))
    work = tmp_path / "work"
    work.mkdir()
    code, err = invoke(argv, capsys, work)
    assert code == 2, err
    assert_clean(code, err, argv)


def test_config_file_not_utf8_and_duplicate_keys(capsys, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    dup = tmp_path / "dup.yaml"
    dup.write_text("rounds: 3\nrounds: 5\n")
    for path, needle in ((latin, "UTF-8"), (dup, "duplicate key")):
        code, err = invoke(["run", str(path), "--check"], capsys, work)
        assert code == 2 and needle in err, err
        assert_clean(code, err, [str(path)])


def _write_config(folder: Path, raw: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    return path


# --- generated input: every key fedsim keys lists (a new key is covered the day it lands) ---
SECTIONS = all_keys()
KEYS = sorted(
    {k.key for docs in SECTIONS.values() for k in docs}
    | {"nope", "data.nope", "client.lr.x", "algorithm"}
)
ALGORITHM_NAMES = sorted(name for name in SECTIONS if name != "experiment")
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["iid", "dirichlet", "ray", "local", "cpu", "cuda", "fedavg", "../x", "/tmp"]),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.text(max_size=4), SCALARS, max_size=2),
)
BROKEN_YAML = st.sampled_from(
    ["[a,b", "{x: ", "@x", "*y", "'open", "a: b: c", "\t- x", "!!python/name:os.system"]
)


def _yaml_text(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan")
    return (
        yaml.safe_dump(value, default_flow_style=True, allow_unicode=True)
        .strip()
        .removesuffix("...")
        .strip()
    )


OVERRIDES = st.one_of(
    st.builds(lambda k, v: f"{k}={_yaml_text(v)}", st.sampled_from(KEYS), VALUES),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), BROKEN_YAML),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.text(max_size=10)),
    st.text(max_size=15),
)


@settings(
    max_examples=1500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    overrides=st.lists(OVERRIDES, min_size=1, max_size=3),
    algorithm=st.one_of(st.none(), st.sampled_from(ALGORITHM_NAMES)),
)
def test_generated_overrides_validate_or_fail_in_one_line(
    overrides, algorithm, capsys, tmp_path_factory
):
    """Generated values for any key of any algorithm (its own keys, or another's), with the
    algorithm named or the default one."""
    folder = tmp_path_factory.mktemp("prop")
    config = _write_config(folder / "cfg", {})
    work = folder / "work"
    work.mkdir()
    chosen = [] if algorithm is None else [f"algorithm.name={algorithm}"]
    argv = ["run", str(config), "--check", *BASE, *chosen, *overrides]
    code, err = invoke(argv, capsys, work)
    assert_clean(code, err, argv)


CONFIGS = st.dictionaries(
    st.sampled_from(["name", "rounds", "seed", "data", "client", "runtime", "algorithm", "x"]),
    st.one_of(
        VALUES,
        st.dictionaries(
            st.sampled_from(["name", "lr", "alpha", "num_clients", "executor", "epochs"]),
            SCALARS,
            max_size=3,
        ),
    ),
    max_size=4,
)


@settings(
    max_examples=800,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=CONFIGS, garbage=st.one_of(st.none(), st.binary(max_size=40)))
def test_generated_config_files_validate_or_fail_in_one_line(
    raw, garbage, capsys, tmp_path_factory
):
    folder = tmp_path_factory.mktemp("cfgprop")
    path = folder / "config.yaml"
    if garbage is not None:
        path.write_bytes(garbage)
    else:
        path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    work = folder / "work"
    work.mkdir()
    argv = ["run", str(path), "--check", "runtime.executor=local"]
    code, err = invoke(argv, capsys, work)
    assert_clean(code, err, argv)
