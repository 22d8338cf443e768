"""The edit loop's list of slow tests (tests/edit_loop.py) names tests that exist, and the
marker it adds is the one ``make test-fast`` deselects."""

from __future__ import annotations

import pytest
from conftest import COLLECTED
from edit_loop import SLOW_IN_THE_EDIT_LOOP, base_id


def test_every_listed_test_is_collected(request: pytest.FixtureRequest) -> None:
    collected = request.config.stash[COLLECTED]
    files = {nodeid.split("::", 1)[0] for nodeid in collected}
    listed_here = {i for i in SLOW_IN_THE_EDIT_LOOP if i.split("::", 1)[0] in files}
    missing = sorted(listed_here - collected)  # only files this session collected can say
    assert not missing, f"tests/edit_loop.py names tests that do not exist: {missing}"


def test_every_listed_test_this_session_runs_is_marked_slow(request: pytest.FixtureRequest) -> None:
    """So ``-m "not slow"`` (``make test-fast``) deselects it and ``make test`` still runs it."""
    listed = [i for i in request.session.items if base_id(i.nodeid) in SLOW_IN_THE_EDIT_LOOP]
    unmarked = [i.nodeid for i in listed if i.get_closest_marker("slow") is None]
    assert not unmarked, f"listed in tests/edit_loop.py but not marked slow: {unmarked}"
