"""The reference pages made from the code are current, and so are the generated blocks of the
written pages (docs/gen/reference.py; ``make docs-ref`` rewrites them all).

A failure here means the code changed (a config key, a --help text, an algorithm, a model, a
dataset, a shipped config) and the docs did not: run ``make docs-ref`` and commit the result.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIX = "is stale: run `make docs-ref` (python docs/gen/reference.py) and commit the result"


def generator():
    spec = importlib.util.spec_from_file_location("docs_reference", REPO / "docs/gen/reference.py")
    module = sys.modules.get("docs_reference")
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["docs_reference"] = module
        spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["config-keys.md", "cli.md", "compatibility.md"])
def test_generated_page_is_current(page):
    gen = generator()
    committed = (gen.REFERENCE / page).read_text(encoding="utf-8")
    assert committed == gen.PAGES[page](), f"docs/reference/{page} {FIX}"


def test_generated_blocks_of_written_pages_are_current():
    gen = generator()
    stale = []
    for path in gen.written_pages():
        text = path.read_text(encoding="utf-8")
        if gen.fill_blocks(text) != text:
            stale.append(str(path.relative_to(REPO)))
    assert not stale, f"generated blocks in {', '.join(stale)} {FIX}"


def test_every_generated_block_is_known_and_closed():
    gen = generator()
    for path in gen.written_pages():
        text = path.read_text(encoding="utf-8")
        opened = re.findall(r"<!-- gen:([a-z-]+) -->", text)
        closed = re.findall(r"<!-- /gen:([a-z-]+) -->", text)
        assert opened == closed, f"{path.relative_to(REPO)}: unbalanced generated blocks"
        assert set(opened) <= set(gen.BLOCKS), f"{path.relative_to(REPO)}: {opened}"


def test_the_help_names_a_docs_page_that_exists(capsys):
    """``fedsim run --help`` sends readers to the generated key reference, which exists."""
    from fedsim.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    named = re.findall(r"docs/[\w/.-]+\.md", text)
    assert named == ["docs/reference/config-keys.md"], text
    assert (REPO / named[0]).is_file() and "README" not in text


def test_own_model_page_says_which_algorithms_need_features():
    """docs/howto/own-model.md names the algorithms that call features(x) (their
    ``model_needs``), and --check takes a plain module under every algorithm."""
    from fedsim.algorithms import ALGORITHMS

    gen = generator()
    plain = {n: cells["plain LightningModule"] for n, cells in gen.compatibility()[1].items()}
    assert {n for n, v in plain.items() if v not in ("ok", "n/a")} == set(), plain
    text = (REPO / "docs/howto/own-model.md").read_text(encoding="utf-8")
    line = next(x for x in text.splitlines() if x.startswith("Only these algorithms call"))
    named = set(re.findall(r"`([a-z]+)`", line))
    needs = {n for n, cls in ALGORITHMS.items() if cls.__module__.startswith("fedsim.")
             and "features" in cls.model_needs}  # fmt: skip
    assert named == needs
