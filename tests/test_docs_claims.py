"""Claims the docs make that the code can answer, held to it (the ones not generated).

- every install command names the distribution in pyproject.toml (``fedsim`` on PyPI is an
  unrelated project), in the docs, the README, the notebook and fedsim's own messages;
- the version is one number: pyproject, ``fedsim.__version__``, CITATION.cff, CHANGELOG;
- which client-term hook each pull uses (architecture.md names FedProx's as a loss, Ditto's
  and FedAMP's as gradient corrections);
- shipped configs run on the default executor unless the file says why it pins another;
- the algorithms page's overview table lists every built-in algorithm;
- checkpoint file names in the docs are the ones fedsim writes;
- every relative link of the README (to a file, and to a heading in it) resolves.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from docs_snippets import docs_pages

import fedsim
from fedsim.config import load_config
from fedsim.keys import algorithm_names

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
DISTRIBUTION = PROJECT["name"]


def text_files() -> list[Path]:
    """Where an install command may be written: docs, README, notebooks, code, Makefile."""
    files = [*docs_pages(), REPO / "Makefile", *sorted((REPO / "notebooks").glob("*.ipynb"))]
    for package in ("fedsim", "ray_jobs", "lightning_modules", "benchmarks", "examples"):
        files += sorted((REPO / package).rglob("*.py"))
    return files


def test_the_distribution_name_is_free_of_the_pypi_clash():
    assert DISTRIBUTION == "fedsim-pfl" and DISTRIBUTION != "fedsim"


def test_every_install_command_names_this_distribution():
    bad = []
    for path in text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for command in re.findall(r"pip install ([^`\n)]*)", line):
                for word in command.split("#")[0].split():
                    name = word.strip("'\"\\").split("[")[0]
                    if name.startswith("fedsim") and name != DISTRIBUTION:
                        bad.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not bad, f"install commands must name {DISTRIBUTION}:\n" + "\n".join(bad)


def test_one_version_everywhere():
    version = PROJECT["version"]
    assert fedsim.__version__ == version
    assert yaml.safe_load((REPO / "CITATION.cff").read_text())["version"] == version
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert released and released[0] == version, "CHANGELOG's newest release is not the version"


def pull_forms() -> dict[str, str]:
    """algorithm file -> the form of the Pull it builds (``Pull(..., "gradient")``)."""
    forms = {}
    for path in sorted((REPO / "fedsim" / "algorithms").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Pull":
                form = node.args[3].value if len(node.args) > 3 else "loss"
                forms[path.stem] = form
    return forms


def test_architecture_names_the_hook_each_pull_uses():
    forms = pull_forms()
    assert forms == {"fedprox": "loss", "ditto": "gradient", "fedamp": "two_pass"}
    text = " ".join((REPO / "docs" / "architecture.md").read_text().split())
    loss = text[text.index("`loss(params)` adds") : text.index("`correct_gradients(params)`")]
    correct = text[text.index("`correct_gradients(params)`") : text.index("`objective(module")]
    for name, form in forms.items():
        shown = {"fedprox": "FedProx", "ditto": "Ditto", "fedamp": "FedAMP"}[name]
        assert (shown in loss) == (form == "loss"), (name, form)
        assert (shown in correct) == (form != "loss"), (name, form)


SHIPPED = sorted(p for p in (REPO / "configs").rglob("*.yaml") if "base" not in p.parts)
# configs allowed to pin another executor: each says why in a comment above the line
PINNED = {"configs/quickstart.yaml": "local", "configs/generalization/fmnist.yaml": "local"}


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(REPO)) for p in SHIPPED])
def test_shipped_configs_run_on_the_default_executor_unless_they_say_why(path):
    raw = yaml.safe_load(path.read_text())
    if "tune" in raw:  # a search: its trials' executor is fedsim tune's choice
        return
    where = str(path.relative_to(REPO))
    assert load_config(path).runtime.executor == PINNED.get(where, "auto"), where
    if where in PINNED:
        lines = path.read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if line.strip().startswith("executor:"))
        assert lines[at - 1].strip().startswith("#"), f"{where}: say why it pins the executor"


def test_the_algorithms_overview_lists_every_algorithm():
    """docs/algorithms.md's overview table (an algorithm's own docs section adds its row)."""
    page = (REPO / "docs" / "algorithms.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| [`")]
    listed = {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}
    assert set(algorithm_names()) <= listed, set(algorithm_names()) - listed


def test_checkpoint_names_in_the_docs_are_the_ones_written():
    from fedsim import checkpoint

    source = Path(checkpoint.__file__).read_text()
    assert 'f"round_{checkpoint.rounds_trained:05d}.pt"' in source
    for path in docs_pages():
        for name in re.findall(r"round_[^\s`.)]*\.(?:pt|sha256)", path.read_text()):
            assert re.fullmatch(r"round_\d{5}\.(pt|sha256)", name), f"{path}: {name}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (the docs site uses the same rule)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def test_the_readme_links_resolve():
    """mkdocs checks the pages' links; the README is not a page, so it is checked here."""
    readme = (REPO / "README.md").read_text()
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", readme):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = REPO / path
        if not file.exists():
            bad.append(target)
        elif anchor:
            headings = re.findall(r"^#+ (.+)$", file.read_text(), re.M)
            if anchor not in {slug(h) for h in headings}:
                bad.append(target)
    assert not bad, bad
