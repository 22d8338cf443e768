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


def test_own_model_page_says_which_algorithms_need_an_flmodule():
    """docs/howto/own-model.md's table agrees with what --check says for a plain module."""
    gen = generator()
    plain = {n: cells["plain LightningModule"] for n, cells in gen.compatibility()[1].items()}
    text = (REPO / "docs/howto/own-model.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1] for line in text.splitlines() if line.startswith("| adds")}
    works = next(r for r in rows if r.strip().startswith("adds no client term"))
    refused = next(r for r in rows if r.strip().startswith("adds a client term"))
    names = lambda row: set(re.findall(r"`([a-z]+)`", row))  # noqa: E731
    assert names(works) | names(refused) == set(plain)
    assert {n for n in names(works) if plain[n] != "n/a"} == {
        n for n, v in plain.items() if v == "ok"
    }, "own-model.md lists an algorithm as fine with a plain module that --check refuses"
    assert names(refused) == {n for n, v in plain.items() if v not in ("ok", "n/a")}
