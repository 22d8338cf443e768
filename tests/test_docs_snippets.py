"""Every code block of the README and docs/ runs here, cheaply (the tutorial that trains is
run whole by tests/test_docs_tutorial.py).

Per page, in a fresh folder (``configs/`` and ``examples/`` linked in, a one-round run folder
at ``runs/quickstart``): titled blocks are written as the files they name; each command of a
``bash`` block is checked the cheapest way that still runs it through fedsim:

- ``fedsim run`` / ``python -m ray_jobs.run_experiment``: the same arguments with ``--check``
  (config, data, model and algorithm built; nothing trained or written);
- ``fedsim keys`` / ``--help``: run; ``fedsim tune`` / ``python -m ray_jobs.tune``: the
  config and its search spaces validated; ``python -m ray_jobs.reproduce``: every (config,
  seed) planned and validated (no Ray); ``ray job submit ... -- CMD``: CMD as above;
- ``make TARGET``: a target of the Makefile; ``pip install``: tests/test_docs_claims.py;
  ``python benchmarks/SCRIPT.py ARGS``: with ``--dry-run`` (its commands printed, none run).

Untitled ``python`` blocks are executed; ``yaml`` blocks are loaded as configs; ``console``
lines starting with ``$ fedsim`` are run and their output compared with the block's.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from docs_snippets import REPO, Block, blocks, commands, docs_pages

from fedsim.cli import main
from fedsim.config import load_config

# in the LoRA tests' process: the pages' `fedsim run configs/lora/...` commands build SmolLM2,
# whose base each process loads once (~20 s), so the two share one load
pytestmark = pytest.mark.xdist_group("lora")

# run whole, as a reader follows it, by tests/test_docs_tutorial.py
EXECUTED_WHOLE = {"docs/tutorials/compare-personalization.md"}
GENERATED = {"docs/reference/cli.md", "docs/reference/config-keys.md"}
PAGES = [p for p in docs_pages() if str(p.relative_to(REPO)) not in EXECUTED_WHOLE | GENERATED]
MAKE_TARGETS = set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory) -> Path:
    """A real one-round run folder, for the snippets that read ``runs/quickstart``."""
    from fedsim.experiment import run_experiment

    out = tmp_path_factory.mktemp("quickstart") / "quickstart"
    cfg = load_config(
        REPO / "configs" / "quickstart.yaml",
        ["rounds=1", "data.max_samples=400", "data.num_clients=4"],
    )
    run_experiment(cfg, out, progress=False, report=False)
    return out


def workdir(tmp: Path, quickstart_run: Path) -> Path:
    for name in ("configs", "examples", "notebooks"):
        (tmp / name).symlink_to(REPO / name)
    (tmp / "runs").mkdir()
    (tmp / "runs" / "quickstart").symlink_to(quickstart_run)
    return tmp


@contextlib.contextmanager
def in_folder(folder: Path, paths: list[str]):
    """cwd ``folder`` and ``paths`` (relative to it) first on sys.path; plug-in modules a
    page imported are forgotten afterwards."""
    old_cwd, old_path, old_modules = os.getcwd(), list(sys.path), set(sys.modules)
    os.chdir(folder)
    sys.path[:0] = [str((folder / p).resolve()) for p in paths]
    try:
        yield
    finally:
        os.chdir(old_cwd)
        sys.path[:] = old_path
        for name in set(sys.modules) - old_modules:
            module = sys.modules[name]
            if str(folder) in str(getattr(module, "__file__", "") or ""):
                del sys.modules[name]


def call(argv: list[str], entry=main) -> tuple[int, str]:
    """Run a CLI in process: (exit code, stdout + stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = entry(argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 0
    return code or 0, out.getvalue()


def split_env(words: list[str]) -> tuple[list[str], list[str]]:
    """(PYTHONPATH entries, the command) of ``PYTHONPATH=x cmd ...``."""
    paths = []
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        name, _, value = words.pop(0).partition("=")
        if name == "PYTHONPATH":
            paths += [p for p in value.split(os.pathsep) if p and "$" not in p]
    return paths, words


def dry_run_benchmark(script: str, args: list[str], where: str) -> None:
    """A benchmark that has ``--dry-run`` (it prints its commands, writes nothing): run so."""
    path = REPO / script
    assert path.is_file(), f"{where}: no script {script}"
    assert "--dry-run" in path.read_text(), f"{where}: {script} has no --dry-run to check it by"
    dry = args if "--dry-run" in args else [*args, "--dry-run"]
    done = subprocess.run([sys.executable, str(path), *dry], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, f"{where}: {script} {dry}: {done.stderr[-2000:]}"


def check_command(command: str, where: str) -> None:
    """Run ``command`` the cheap way (see the module docstring); assert it succeeds."""
    paths, words = split_env(shlex.split(command, comments=True))
    if words[:3] == ["ray", "job", "submit"]:
        words = words[words.index("--") + 1 :]
    if words[:2] == ["python", "-m"]:
        module, words = words[2], words[3:]
        words = {
            "fedsim.cli": words,
            "ray_jobs.run_experiment": ["run", *words],
            "ray_jobs.tune": ["tune", *words],
        }.get(module, [module, *words])
    elif words[0] == "fedsim":
        words = words[1:]
    elif words[0] == "make":
        assert set(words[1:]) <= MAKE_TARGETS, f"{where}: no make target {words[1:]}"
        return
    elif words[0] == "pip":
        return  # names checked by tests/test_docs_claims.py
    elif words[0] == "python" and words[1:2] and words[1].startswith("benchmarks/"):
        dry_run_benchmark(words[1], words[2:], where)
        return
    else:
        raise AssertionError(f"{where}: teach tests/test_docs_snippets.py to run {command!r}")
    with in_folder(Path.cwd(), paths):
        if words[0] == "ray_jobs.reproduce":
            check_reproduce(words[1:], where)
        elif words[0] == "tune":
            check_tune(words[1:], where)
        elif words[0] == "run" and not {"--check", "--print-config", "--help"} & set(words):
            words = [w for w in words if w not in ("--resume", "--overwrite", "--no-progress")]
            code, out = call([*words, "--check"])
            assert code == 0, f"{where}: {command}\n{out}"
        else:
            code, out = call(words)
            assert code == 0, f"{where}: {command}\n{out}"


def check_reproduce(args: list[str], where: str) -> None:
    from ray_jobs.reproduce import plan_runs

    configs = [a for a in args if "=" not in a and not a.startswith("-") and a.endswith(".yaml")]
    overrides = [a for a in args if "=" in a]
    seeds = [int(a) for a in args if a.isdigit()] or [0]
    specs = plan_runs(configs, seeds, overrides, Path("runs") / "planned", "auto")
    assert len(specs) == len(configs) * len(seeds), where


def check_tune(args: list[str], where: str) -> None:
    from fedsim.search.space import parse_space
    from fedsim.search.sweep import load_tune_config, validate_search

    config = args[0]
    overrides = [a for a in args[1:] if "=" in a and not a.startswith("-")]
    searches = [args[i + 1] for i, a in enumerate(args) if a == "--search"]
    raw, section = load_tune_config(config, [o for o in overrides if o not in searches])
    spaces = [parse_space(s) for s in searches] or [
        parse_space(f"{k}={v}") for k, v in (section.get("search") or {}).items()
    ]
    assert spaces, f"{where}: a search needs --search or a tune.search section"
    validate_search(load_config(None, []).to_dict() | raw, spaces)


def run_python(block: Block) -> None:
    code = compile(block.text, block.where, "exec")
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, {"__name__": "__docs__"})  # noqa: S102 - the docs' own snippet


def check_console(block: Block) -> None:
    """``$ fedsim ...`` lines run, their output equal to the lines below them."""
    lines = block.text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("$ "):
            continue
        paths, words = split_env(shlex.split(line[2:], comments=True))
        if words[0] != "fedsim":
            continue
        expected = []
        for following in lines[i + 1 :]:
            if following.startswith("$ "):
                break
            expected.append(following)
        with in_folder(Path.cwd(), paths):
            _, out = call(words[1:])
        assert out.strip().splitlines() == expected, f"{block.where}:\n{out}"


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_code_block_runs(page, tmp_path, quickstart_run, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    folder = workdir(tmp_path, quickstart_run)
    monkeypatch.chdir(folder)
    for block in blocks(page):
        if block.title:
            target = folder / block.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text)
            if block.language == "python":
                compile(block.text, block.where, "exec")
            elif block.language == "yaml" and "base:" not in block.text:
                load_config(target)
        elif block.language == "bash":
            for command in commands(block.text):
                check_command(command, block.where)
        elif block.language == "python":
            with in_folder(folder, ["."]):
                run_python(block)
        elif block.language == "yaml":
            path = folder / "snippet.yaml"
            path.write_text(block.text)
            assert isinstance(yaml.safe_load(block.text), dict), block.where
            load_config(path)
        elif block.language == "console":
            check_console(block)
        else:
            assert block.language in ("text", ""), f"{block.where}: language {block.language!r}"


def test_every_page_but_the_generated_ones_is_covered():
    covered = {str(p.relative_to(REPO)) for p in PAGES} | EXECUTED_WHOLE | GENERATED
    assert covered == {str(p.relative_to(REPO)) for p in docs_pages()}
