"""Issue 64, a newcomer's docs: the README names eval.when's real default, and `make docs-ref`
regenerates the reference with the python there is, without `make setup`."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fedsim.config.evaluation import EvalConfig

REPO = Path(__file__).resolve().parents[1]


def test_the_readme_names_eval_when_default():
    default = next(f.default for f in dataclasses.fields(EvalConfig) if f.name == "when")
    paragraphs = (REPO / "README.md").read_text().split("\n\n")
    said = [p for p in paragraphs if "eval.when" in p]
    assert said, "the README says nothing of eval.when"
    for paragraph in said:
        text = " ".join(paragraph.split())
        assert f"By default (`eval.when={default}`)" in text, text
        assert not re.search(r"fedsim's default\)", text), text


def test_docs_ref_does_not_start_a_setup(tmp_path):
    rule = re.search(r"^docs-ref:(.*)$", (REPO / "Makefile").read_text(), re.M)
    assert rule is not None and "setup" not in rule.group(1)
    if shutil.which("make") is None:
        pytest.skip("no make here")
    # a fresh clone: no .venv, so it must fall back to python3 rather than install one
    dry = subprocess.run(["make", "-n", "-C", str(REPO), "docs-ref", f"VENV={tmp_path}/none"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "python3 docs/gen/reference.py" in dry and "pip" not in dry and "uv " not in dry
