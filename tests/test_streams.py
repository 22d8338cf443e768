"""The random-stream registry (``fedsim/streams.py``): no two streams can draw the same
numbers in one run, each stream is drawn where the registry says, and no seeding call in
fedsim carries a bare number (a new stream gets its tag in the registry)."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import numpy as np
import pytest

from fedsim import streams
from fedsim.streams import OVERLAPS, STREAMS, Stream

REPO = Path(__file__).resolve().parents[1]
POOL_WORDS = 4  # numpy's SeedSequence pads a list of up to 4 words with zeros
SEEDING_CALLS = {"default_rng", "SeedSequence", "manual_seed", "draw_participation",
                 "torch_seed"}  # fmt: skip
# a figure's jitter, not a simulation stream (redrawing a report gives the same picture)
NOT_SIMULATION = {"fedsim/tracking/report.py"}


def padded(layout: tuple[str | int, ...]) -> tuple[str | int, ...]:
    return layout + (0,) * (POOL_WORDS - len(layout)) if len(layout) < POOL_WORDS else layout


def can_meet(a: Stream, b: Stream) -> bool:
    """Can both layouts give one list? Slots are free, except that ``seed`` is the run's
    one seed; tags must be equal word for word (after numpy's zero padding)."""
    x, y = padded(a.layout), padded(b.layout)
    if a.kind != b.kind or len(x) != len(y):
        return False
    seed: set[int] = set()
    for u, v in zip(x, y, strict=True):
        if isinstance(u, int) and isinstance(v, int):
            if u != v:
                return False
        elif "seed" in (u, v) and isinstance(other := v if u == "seed" else u, int):
            seed.add(other)
    return len(seed) <= 1


def test_numpy_pads_short_seed_lists_as_the_registry_assumes() -> None:
    def draw(entropy: list[int]) -> float:
        return float(np.random.default_rng(entropy).random())

    assert draw([5, 21]) == draw([5, 21, 0]) == draw([5, 21, 0, 0])
    assert draw([5, 21, 0, 0, 0]) != draw([5, 21])  # past the pool: a zero counts
    assert draw([0, 2652, 7]) == draw([0, streams.DISPATCH_TAG, streams.COHORT_TAG])


def test_no_two_streams_can_draw_the_same_numbers_unless_listed_with_why() -> None:
    meeting = {
        frozenset({a.name, b.name})
        for a, b in itertools.combinations(STREAMS.values(), 2)
        if can_meet(a, b)
    }
    assert meeting == set(OVERLAPS), (
        f"unexplained: {sorted(map(sorted, meeting - set(OVERLAPS)))}; "
        f"listed but cannot meet: {sorted(map(sorted, set(OVERLAPS) - meeting))}"
    )
    assert all(len(why) > 40 for why in OVERLAPS.values())


def test_the_checker_finds_a_collision_it_is_shown() -> None:
    a = Stream("a", "m", "numpy", ("seed", 21))
    assert can_meet(a, Stream("b", "m", "numpy", ("seed", 21, "round")))  # round 0
    assert not can_meet(a, Stream("c", "m", "numpy", ("seed", 22)))
    assert not can_meet(a, Stream("d", "m", "torch32", ("seed", 21)))  # another generator


@pytest.mark.parametrize("stream", STREAMS.values(), ids=list(STREAMS))
def test_each_stream_is_drawn_by_its_owner_with_its_tag(stream: Stream) -> None:
    source = (REPO / (stream.owner.replace(".", "/") + ".py")).read_text()
    names = {name for name, value in vars(streams).items() if name.isupper()}
    tags = [word for word in stream.layout if isinstance(word, int) and word != 0]
    carriers = {n for n in names for tag in tags if tag in _values(getattr(streams, n))}
    assert not tags or any(name in source for name in carriers), (stream.name, carriers)


def _values(value: object) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _numbers_in_seeding_calls(tree: ast.AST) -> list[int]:
    """Lines where a seeding call, or a ``seed`` list built for one, holds a nonzero literal
    inside a list or tuple (an entropy word), or is called with one."""
    found = []

    def literals(node: ast.AST) -> bool:
        for display in ast.walk(node):
            if isinstance(display, ast.List | ast.Tuple) and any(
                isinstance(e, ast.Constant) and type(e.value) is int and e.value != 0
                for e in display.elts
            ):
                return True
        return False

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            args = [*node.args, *(k.value for k in node.keywords if name in SEEDING_CALLS
                                  or k.arg == "seed")]  # fmt: skip
            if name in SEEDING_CALLS:
                plain = [a for a in node.args if isinstance(a, ast.Constant) and a.value != 0]
                if plain or any(literals(a) for a in args):
                    found.append(node.lineno)
            elif any(k.arg == "seed" and literals(k.value) for k in node.keywords):
                found.append(node.lineno)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id.endswith("seed") for t in node.targets
        ):
            if isinstance(node.value, ast.List | ast.Tuple) and literals(node.value):
                found.append(node.lineno)
    return found


def test_no_seeding_call_carries_a_bare_number() -> None:
    bare = []
    for package in ("fedsim", "lightning_modules"):
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if relative == "fedsim/streams.py" or relative in NOT_SIMULATION:
                continue
            lines = _numbers_in_seeding_calls(ast.parse(path.read_text()))
            bare += [f"{relative}:{line}" for line in lines]
    assert bare == [], f"name the stream in fedsim/streams.py: {bare}"


def test_the_scan_sees_a_bare_number() -> None:
    tree = ast.parse("rng = np.random.default_rng([seed, round_idx, 7])\nseed = [s, r, 17]\n"
                     "f(seed=(s, 20))\nnp.random.default_rng([seed, TAG])\n")  # fmt: skip
    assert sorted(_numbers_in_seeding_calls(tree)) == [1, 2, 3]
