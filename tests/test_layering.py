"""The layering DESIGN.md draws, checked on the source: arrows point down only.

cli/ray_jobs -> simulation -> {algorithms, runtime, tracking} -> {data, lightning_modules}.
Every ``import`` in every module of fedsim/, lightning_modules/ and ray_jobs/ is read with
``ast`` (imports inside functions too, so a lazy import cannot hide a cycle); each rule
lists all of its violations, one per line, with file and line.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("fedsim", "lightning_modules", "ray_jobs")


@dataclass(frozen=True)
class Import:
    source: str  # dotted module that imports
    target: str  # dotted module imported
    where: str  # file:line


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = REPO) -> list[Import]:
    source = module_name(path, root)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    where = path.relative_to(root)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            # ``from fedsim import simulation`` imports the module fedsim.simulation
            submodules = [f"{module}.{alias.name}" for alias in node.names]
            targets = [module] + [m for m in submodules if is_module(m, root)]
        else:
            continue
        found += [Import(source, t, f"{where}:{node.lineno}") for t in targets if t]
    return found


def is_module(name: str, root: Path) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def all_imports() -> list[Import]:
    files = sorted(f for p in PACKAGES for f in (REPO / p).rglob("*.py"))
    return [i for f in files for i in imports_of(f)]


def within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


# (rule, importers it applies to, importers exempt, forbidden targets)
RULES = [
    ("fedsim never imports ray_jobs (no cycle)", ("fedsim",), (), ("ray_jobs",)),
    (
        "algorithms and runtime never import tracking",
        ("fedsim.algorithms", "fedsim.runtime"),
        (),
        ("fedsim.tracking",),
    ),
    (
        "tracking never imports algorithms or the simulation",
        ("fedsim.tracking",),
        (),
        ("fedsim.algorithms", "fedsim.simulation"),
    ),
    ("algorithms never import the runtime", ("fedsim.algorithms",), (), ("fedsim.runtime",)),
    (
        "only the runtime, the search package and ray_jobs import ray",
        PACKAGES,
        ("fedsim.runtime", "fedsim.search", "ray_jobs"),
        ("ray",),
    ),
    (
        "lightning_modules and data never import algorithms/runtime/simulation/tracking",
        ("lightning_modules", "fedsim.data"),
        (),
        ("fedsim.algorithms", "fedsim.runtime", "fedsim.simulation", "fedsim.tracking"),
    ),
]


def violations(importers, exempt, forbidden, imports: list[Import]) -> list[str]:
    """One line per offending import statement: ``file:line: module imports target(s)``."""
    by_statement: dict[tuple[str, str], list[str]] = {}
    for i in imports:
        if (
            within(i.source, *importers)
            and not within(i.source, *exempt)
            and within(i.target, *forbidden)
        ):
            by_statement.setdefault((i.where, i.source), []).append(i.target)
    return sorted(
        f"{where}: {source} imports {', '.join(targets)}"
        for (where, source), targets in by_statement.items()
    )


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return all_imports()


@pytest.mark.parametrize("rule, importers, exempt, forbidden", RULES, ids=[r[0] for r in RULES])
def test_layering_rule(rule, importers, exempt, forbidden, imports) -> None:
    found = violations(importers, exempt, forbidden, imports)
    assert not found, f"{rule}: {len(found)} violation(s)\n" + "\n".join(found)


def test_the_scanner_sees_lazy_and_relative_imports(tmp_path) -> None:
    """The checker itself: imports inside functions and relative imports are found."""
    for module in ("fedsim/tracking/__init__", "fedsim/algorithms/base", "fedsim/simulation"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{module}.py").write_text("")
    plots = tmp_path / "fedsim" / "tracking" / "plots.py"
    plots.write_text(
        "from ..algorithms import base\n\n\ndef f():\n"
        "    import ray\n"
        "    from fedsim import simulation\n"
    )
    imports = imports_of(plots, tmp_path)
    assert {i.target for i in imports} == {
        "fedsim.algorithms",
        "fedsim.algorithms.base",
        "ray",
        "fedsim",
        "fedsim.simulation",
    }
    rule = next(r for r in RULES if r[1] == ("fedsim.tracking",))
    assert violations(*rule[1:], imports) == [
        "fedsim/tracking/plots.py:1: fedsim.tracking.plots imports "
        "fedsim.algorithms, fedsim.algorithms.base",
        "fedsim/tracking/plots.py:6: fedsim.tracking.plots imports fedsim.simulation",
    ]
