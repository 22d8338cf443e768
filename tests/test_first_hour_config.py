"""Issue 56, a newcomer's config and command line: a subclass's errors name it (point 5), the
search parser reads numbers as a config does (point 17)."""

from __future__ import annotations

import sys
import textwrap

import pytest

from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.search.space import Space, parse_space


def test_5_a_subclass_of_fedprox_is_refused_with_its_own_name(tmp_path, monkeypatch):
    (tmp_path / "my_algos_56.py").write_text(
        textwrap.dedent("""
        from fedsim.algorithms.fedprox import FedProx

        class DecayProx(FedProx):
            pass
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as err:
        load_config(None, ["algorithm.name=my_algos_56:DecayProx"])
    assert "required for my_algos_56:DecayProx" in str(err.value)
    with pytest.raises(ConfigError, match="required for fedprox"):  # the built-in keeps its own
        load_config(None, ["algorithm.name=fedprox"])
    sys.modules.pop("my_algos_56", None)


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("client.lr=loguniform(1e-3,0.1)", (1e-3, 0.1)),
        ("client.lr=uniform(1E-4, 5e-2)", (1e-4, 5e-2)),
        ("client.lr=choice(1e-3,3e-3)", (1e-3, 3e-3)),
    ],
)
def test_17_exponent_numbers_are_numbers_in_a_search(text, args):
    space = parse_space(text)
    assert space == Space("client.lr", space.kind, args)
    assert all(isinstance(a, float) for a in space.args)
