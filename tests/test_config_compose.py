"""Configs that start from others (``base:``), ``${...}`` interpolation, --print-config, and
every config in configs/ (folded onto shared bases) validating as it did."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedsim.cli import main
from fedsim.config import load_config
from fedsim.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p for p in (REPO / "configs").rglob("*.yaml") if "base" not in p.parts)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_base_merges_key_by_key_then_overrides_then_interpolation(tmp_path):
    write(tmp_path, "common/protocol.yaml", "rounds: 3\nclient:\n  lr: 0.05\n  batch_size: 10\n")
    write(tmp_path, "common/data.yaml", "data:\n  name: mnist-5k\n  num_clients: 6\n")
    run = write(
        tmp_path,
        "runs/fedprox.yaml",
        "base: [../common/protocol.yaml, ../common/data.yaml]\n"
        'name: "${algorithm.name}-${data.num_clients}"\n'
        "client:\n  batch_size: 20\n"
        "algorithm:\n  name: fedprox\n  mu: 0.01\n",
    )
    cfg = load_config(run, ["data.num_clients=8"])
    assert (cfg.name, cfg.rounds, cfg.client.lr, cfg.client.batch_size) == (
        "fedprox-8",
        3,
        0.05,
        20,
    )


@pytest.mark.parametrize(
    ("files", "needle"),
    [
        ({"a.yaml": "base: a.yaml\n"}, "cannot start from itself"),
        ({"a.yaml": "base: b.yaml\n", "b.yaml": "base: a.yaml\n"}, "cannot start from itself"),
        ({"a.yaml": "base: missing.yaml\n"}, "file not found"),
        ({"a.yaml": "base: 3\n"}, "a path or a list of paths"),
        ({"a.yaml": 'name: "${data.nme}"\n'}, "interpolation failed"),
        ({"a.yaml": "rounds: 2\nrounds: 3\n"}, "duplicate key"),
    ],
)
def test_bad_composition_is_one_config_error(files, needle, tmp_path):
    for name, text in files.items():
        write(tmp_path, name, text)
    with pytest.raises(ConfigError, match=needle):
        load_config(tmp_path / "a.yaml")


def test_a_symlink_loop_is_one_line_naming_the_path(tmp_path, capsys):
    """A config (or a base, or --out) that is a symlink loop: one line, exit 2, not
    pathlib's ``RuntimeError: Symlink loop``."""
    (tmp_path / "a.yaml").symlink_to("b.yaml")
    (tmp_path / "b.yaml").symlink_to("a.yaml")
    based = write(tmp_path, "run.yaml", "base: a.yaml\nrounds: 1\n")
    for config, out in (
        (tmp_path / "a.yaml", []),
        (based, []),
        (REPO / "configs" / "quickstart.yaml", ["--out", str(tmp_path / "a.yaml")]),
    ):
        assert main(["run", str(config), "--check", *out]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert str(tmp_path / "a.yaml") in err
        assert "symlink loop" in err or "symlink that leads nowhere (a loop" in err


def test_base_on_the_command_line_is_refused():
    with pytest.raises(ConfigError, match="base=.*only in a config file"):
        load_config(None, ["base=x.yaml"])


def test_print_config_is_the_merged_config_with_every_default(capsys):
    config = REPO / "configs" / "cwfedavg" / "fmnist-pat-fedavg.yaml"
    assert main(["run", str(config), "rounds=7", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == load_config(config, ["rounds=7"]).to_dict()
    assert printed["rounds"] == 7 and printed["data"]["name"] == "fashion-mnist"
    assert printed["privacy"]["mode"] == "none" and "asynchronous" in printed  # every section


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(REPO)) for p in CONFIGS])
def test_every_config_validates(path):
    raw = yaml.safe_load(path.read_text())
    if "tune" in raw:
        from fedsim.search.sweep import load_tune_config

        raw, section = load_tune_config(path, [])
        assert section
        return
    load_config(path)


def test_configs_are_folded_onto_shared_bases():
    """Configs that differ only in their name and algorithm start from one base."""
    bases = sorted((REPO / "configs").rglob("base/*.yaml"))
    assert len(bases) >= 20
    users = [p for p in CONFIGS if "base:" in p.read_text()]
    assert len(users) >= 100
