"""`make docs-check` can fail: a copy of the site with one broken link is refused.

The check once ran ``mkdocs build --strict --quiet``: ``--quiet`` hides warnings from strict
mode, so a broken link passed. Here the real Makefile target builds a copy of ``docs/`` (the
rest of the repository linked in, as the hooks and the API pages read it) with one link to a
page that does not exist; it must exit non-zero, name the link, and count exactly that one
warning (so the rest of the copy, the shipped site, builds clean). The copy is a real one
(~6 MB): the link hook resolves symlinks, so linked files would count as outside it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def broken_copy(tmp_path: Path) -> Path:
    """A copy of the repository's tracked-looking files (no venv, git or caches); its
    index.md links a page that is not there. Returns the copy's mkdocs.yml."""
    copy = tmp_path / "repo"
    anywhere = shutil.ignore_patterns(".*", "__pycache__", "*.egg-info")
    at_root = {"site", "runs", "data", "wandb"}  # git-ignored outputs and prepared data

    def skipped(folder: str, names: list[str]) -> set[str]:
        return anywhere(folder, names) | (at_root & set(names) if folder == str(REPO) else set())

    shutil.copytree(REPO, copy, ignore=skipped)
    with open(copy / "docs" / "index.md", "a") as index:
        index.write("\nSee [the missing page](no-such-page.md).\n")
    return copy / "mkdocs.yml"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_broken_link_fails_make_docs_check(tmp_path):
    if not (REPO / ".venv" / "bin" / "mkdocs").exists():
        pytest.skip("no .venv with mkdocs (make setup makes one)")
    config = broken_copy(tmp_path)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        ["make", "-s", "-C", str(REPO), "docs-check", f"DOCS_CONFIG={config}"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "no-such-page.md" in out, out
    assert "Aborted with 1 warnings" in out, out  # the shipped pages add none
    assert "INFO " not in out  # the output stays short
