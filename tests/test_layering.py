"""The layering, checked on the source: every module has a layer, arrows point down only.

``LAYERS`` is the one table (docs/architecture.md shows it, and a test keeps the two equal).
Every ``import`` of every module in fedsim/, lightning_modules/ and ray_jobs/ is read with
``ast`` (imports inside functions and under ``TYPE_CHECKING`` too: a lazy import is still a
dependency). An import is allowed within a component, or to a component in a lower layer;
components of one layer are peers and never import each other. No circle of modules either.
A few promises the order alone cannot express are named rules below (tracking never knows an
algorithm; the runtime and deployment know algorithms only through the seam; who imports Ray;
an algorithm's file borrows from another algorithm's only the class it subclasses; checking a
config imports no torch).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("fedsim", "lightning_modules", "ray_jobs")

# bottom to top; a component is a package (with its modules) or a module
LAYERS: list[tuple[str, ...]] = [
    ("fedsim", "fedsim.errors", "fedsim.hub_offline"),
    (
        "fedsim.checks", "fedsim.sizes", "fedsim.plugins", "fedsim.figures", "fedsim.metrics",
        "fedsim.interrupts", "fedsim.wire", "fedsim.gradient_tasks", "fedsim.startup_timeline",
        "fedsim.streams", "fedsim.schedules", "fedsim.pretrained", "fedsim.round_context",
    ),
    ("fedsim.data", "lightning_modules", "fedsim.storage", "fedsim.system"),
    ("fedsim.algorithm_params",),
    ("fedsim.config",),
    ("fedsim.client_work",),
    ("fedsim.algorithms", "fedsim.run_folder", "fedsim.run_plan"),
    ("fedsim.deployment",),
    ("fedsim.runtime", "fedsim.tracking"),
    ("fedsim.checkpoint_allowlist", "fedsim.checkpoint_digest"),
    ("fedsim.checkpoint",),
    ("fedsim.checkpoint_resume", "fedsim.run_figures"),
    ("fedsim.rounds",),
    ("fedsim.simulation",),
    ("fedsim.experiment", "fedsim.keys"),
    ("fedsim.search", "fedsim.early_start"),
    ("fedsim.cli",),
    ("ray_jobs",),
]  # fmt: skip

# (rule, importers, targets they may not import, targets exempt from that)
NAMED_RULES = [
    ("tracking never imports an algorithm", ("fedsim.tracking",), ("fedsim.algorithms",), ()),
    (
        "the runtime and deployment know algorithms only through the seam (base, seam, sums)",
        ("fedsim.runtime", "fedsim.deployment"),
        ("fedsim.algorithms",),
        ("fedsim.algorithms.base", "fedsim.algorithms.seam", "fedsim.algorithms.sums"),
    ),
    (
        "only the runtime, the search package and ray_jobs import ray",
        PACKAGES,
        ("ray",),
        (),
    ),
]
RAY_IMPORTERS = ("fedsim.runtime", "fedsim.search", "ray_jobs")


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


def modules_of(root: Path = REPO) -> list[Path]:
    return sorted(f for p in PACKAGES for f in (root / p).rglob("*.py"))


def within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def component_of(module: str, layers: list[tuple[str, ...]] = LAYERS) -> tuple[str, int] | None:
    """(the module's component, its layer): the longest entry that is the module or one of its
    packages; the root package ``fedsim`` holds only its own ``__init__``."""
    best: tuple[str, int] | None = None
    for level, entries in enumerate(layers):
        for entry in entries:
            if entry == "fedsim" and module != "fedsim":
                continue
            if within(module, entry) and (best is None or len(entry) > len(best[0])):
                best = (entry, level)
    return best


def upward_imports(imports: Iterable[Import], layers: list[tuple[str, ...]] = LAYERS) -> list[str]:
    """One line per import that is not within a component nor down to a lower layer."""
    found = []
    for i in imports:
        source, target = component_of(i.source, layers), component_of(i.target, layers)
        if source is None or target is None or source[0] == target[0]:
            continue  # outside the packages (torch, numpy...) or within one component
        if target[1] >= source[1]:
            how = "up" if target[1] > source[1] else "sideways"
            found.append(
                f"{i.where}: {i.source} ({source[0]}, layer {source[1]}) imports {i.target} "
                f"({target[0]}, layer {target[1]}): {how}"
            )
    return sorted(found)


def circles(imports: Iterable[Import], modules: Iterable[str]) -> list[list[str]]:
    """Strongly connected groups of modules (size > 1). A module importing its own package
    (``fedsim.algorithms.x`` -> ``fedsim.algorithms``) is how packages work, not a circle."""
    names = set(modules)
    edges: dict[str, set[str]] = {m: set() for m in names}
    for i in imports:
        target = i.target
        while target and target not in names:
            target = target.rpartition(".")[0]
        if target and target != i.source and not i.source.startswith(target + "."):
            edges[i.source].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(names):
        if v not in index:
            visit(v)
    return found


def broken_rules(imports: Iterable[Import]) -> list[str]:
    found = []
    for rule, importers, forbidden, exempt in NAMED_RULES:
        for i in imports:
            allowed = RAY_IMPORTERS if forbidden == ("ray",) else ()
            if (
                within(i.source, *importers)
                and not within(i.source, *allowed)
                and within(i.target, *forbidden)
                and not within(i.target, *exempt)
            ):
                found.append(f"{rule}: {i.where}: {i.source} imports {i.target}")
    return sorted(set(found))


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return [i for f in modules_of() for i in imports_of(f)]


def test_every_module_has_a_layer() -> None:
    unplaced = [module_name(f) for f in modules_of() if component_of(module_name(f)) is None]
    assert not unplaced, "modules without a layer (add them to LAYERS):\n" + "\n".join(unplaced)


def test_no_import_points_up_or_sideways(imports) -> None:
    found = upward_imports(imports)
    assert not found, f"{len(found)} import(s) against the layers:\n" + "\n".join(found)


def test_no_circle(imports) -> None:
    found = circles(imports, [module_name(f) for f in modules_of()])
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_named_rules(imports) -> None:
    found = broken_rules(imports)
    assert not found, "\n".join(found)


def test_the_docs_show_this_table() -> None:
    """docs/architecture.md's layer list is this table, top layer first."""
    text = (REPO / "docs" / "architecture.md").read_text()
    shown = [line[2:].split("  ")[0].split(", ") for line in text.splitlines() if line[:2] == "L "]
    assert shown == [list(layer) for layer in reversed(LAYERS)]


# A module of fedsim/algorithms/ imports from an algorithm's file (one that registers an
# algorithm) only a class it subclasses, as Flower's FedProx(FedAvg); a shared piece lives in a
# helper module (shared_part.py, pull.py, param_views.py...) or lower (lightning_modules/
# flat_params.py: ranges, gather, scatter). The same holds for the Params modules of
# fedsim/algorithm_params/ (FedAvgMParams(FedAvgParams)).
SIBLING_RULE = "an algorithm's file is imported only for the class the importer subclasses"
OWN_FILES = {"fedsim.algorithms": "register", "fedsim.algorithm_params": "Params"}


def is_algorithms_file(tree: ast.Module, marker: str) -> bool:
    """Whether a module is an algorithm's: it has a class decorated with ``@register`` (in
    fedsim/algorithms/), or sets ``Params`` (in fedsim/algorithm_params/)."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and marker == "register":
            if any(isinstance(d, ast.Name) and d.id == marker for d in node.decorator_list):
                return True
        if isinstance(node, ast.Assign) and marker == "Params":
            if any(isinstance(t, ast.Name) and t.id == marker for t in node.targets):
                return True
    return False


def sibling_imports(package: str, root: Path = REPO) -> list[str]:
    """One line per import, in ``package``, of an algorithm's module for anything but a base
    class of the importer."""
    folder = root.joinpath(*package.split("."))
    trees = {p.stem: (p, ast.parse(p.read_text(), str(p))) for p in sorted(folder.glob("*.py"))}
    marker = OWN_FILES[package]
    own = {name for name, (_, tree) in trees.items() if is_algorithms_file(tree, marker)}
    found = []
    for name, (path, tree) in trees.items():
        bases = {b.id for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                 for b in node.bases if isinstance(b, ast.Name)}  # fmt: skip
        where = path.relative_to(root)
        for node in ast.walk(tree):
            borrowed: list[tuple[str, str]] = []  # (algorithm module, name taken from it)
            if isinstance(node, ast.Import):
                borrowed = [(a.name.rpartition(".")[2], "the module") for a in node.names
                            if a.name.rpartition(".")[0] == package]  # fmt: skip
            elif isinstance(node, ast.ImportFrom):
                module = f"{package}.{node.module}" if node.level == 1 else node.module or ""
                if module == package:  # from fedsim.algorithms import fedper
                    borrowed = [(a.name, "the module") for a in node.names]
                elif module.rpartition(".")[0] == package:
                    borrowed = [(module.rpartition(".")[2], a.name) for a in node.names]
            for target, what in borrowed:
                if target in own and target != name and what not in bases:
                    found.append(f"{where}:{node.lineno}: {name} imports {what} from {target}")
    return found


@pytest.mark.parametrize("package", sorted(OWN_FILES))
def test_an_algorithm_borrows_only_its_base_class_from_another(package: str) -> None:
    found = sibling_imports(package)
    assert not found, f"{SIBLING_RULE}:\n" + "\n".join(found)


def test_the_sibling_rule_fails_on_a_made_up_tree(tmp_path) -> None:
    folder = tmp_path / "fedsim" / "algorithms"
    folder.mkdir(parents=True)
    files = {
        "fedavg.py": "@register\nclass FedAvg:\n    pass\n\n\ndef helper():\n    pass\n",
        "fedprox.py": (
            "from fedsim.algorithms.fedavg import FedAvg, helper\n\n\n"
            "@register\nclass FedProx(FedAvg):\n    pass\n"
        ),
        "shared.py": "from .fedavg import helper\nfrom fedsim.algorithms import fedavg\n",
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    assert sibling_imports("fedsim.algorithms", tmp_path) == [
        "fedsim/algorithms/fedprox.py:1: fedprox imports helper from fedavg",
        "fedsim/algorithms/shared.py:1: shared imports helper from fedavg",
        "fedsim/algorithms/shared.py:2: shared imports the module from fedavg",
    ]


CONFIG_CHECK = """
import sys
import fedsim.cli  # the command line itself: a config mistake is answered before torch loads
from fedsim.algorithm_params import BUILTIN_NAMES
from fedsim.config import load_config
from fedsim.keys import all_keys, overview
from fedsim.algorithm_params import example
for name in BUILTIN_NAMES:
    load_config("configs/quickstart.yaml", [f"algorithm.name={name}", *example(name)])
all_keys(), overview()
print(len(BUILTIN_NAMES), sorted(m for m in ("torch", "lightning", "ray") if m in sys.modules))
"""


def test_checking_every_algorithms_config_imports_no_torch() -> None:
    """The config check reads each algorithm's Params from fedsim/algorithm_params/ (torch
    takes a second to import, Lightning and Ray more): a fresh process loads the command line,
    validates a config of every built-in algorithm and lists every key without importing them
    (so a mistyped key or value is one line in about a second)."""
    proc = subprocess.run(
        [sys.executable, "-c", CONFIG_CHECK], cwd=REPO, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, heavy = proc.stdout.split(maxsplit=1)
    assert int(count) >= 27 and heavy.strip() == "[]"


def test_the_checker_fails_on_a_made_up_tree(tmp_path) -> None:
    """The checker itself: lazy, relative and TYPE_CHECKING imports are found; an upward, a
    sideways import and a circle are each reported; an unlisted module has no layer."""
    files = {
        "fedsim/__init__.py": "",
        "fedsim/errors.py": "",
        "fedsim/tracking/__init__.py": "",
        "fedsim/tracking/plots.py": (
            "from ..algorithms import base\n\n\ndef f():\n    import ray\n"
            "    from fedsim import simulation\n"
        ),
        "fedsim/algorithms/__init__.py": "",
        "fedsim/algorithms/base.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fedsim import runtime\n"
        ),
        "fedsim/runtime/__init__.py": "from fedsim.tracking import plots\n",
        "fedsim/simulation.py": "from fedsim.algorithms import base\n",
        "fedsim/stray.py": "import fedsim.errors\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    layers = [
        ("fedsim", "fedsim.errors"),
        ("fedsim.algorithms",),
        ("fedsim.runtime", "fedsim.tracking"),
        ("fedsim.simulation",),
    ]
    paths = sorted((tmp_path / "fedsim").rglob("*.py"))
    imports = [i for p in paths for i in imports_of(p, tmp_path)]
    assert {i.target for i in imports if i.source == "fedsim.tracking.plots"} == {
        "fedsim.algorithms", "fedsim.algorithms.base", "ray", "fedsim", "fedsim.simulation",
    }  # fmt: skip
    found = upward_imports(imports, layers)
    assert any("algorithms.base (fedsim.algorithms, layer 1) imports fedsim.runtime" in f
               and f.endswith("up") for f in found)  # fmt: skip
    assert any("plots" in f and "fedsim.simulation" in f and f.endswith("up") for f in found)
    assert any("fedsim.runtime (fedsim.runtime, layer 2) imports fedsim.tracking.plots" in f
               and f.endswith("sideways") for f in found)  # fmt: skip
    names = [module_name(p, tmp_path) for p in paths]
    circle = [
        "fedsim.algorithms.base",
        "fedsim.runtime",
        "fedsim.simulation",
        "fedsim.tracking.plots",
    ]
    assert circles(imports, names) == [circle]
    assert component_of("fedsim.stray", layers) is None
    assert component_of("fedsim", layers) == ("fedsim", 0)
