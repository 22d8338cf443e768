"""`make setup` hands uv the package sources pip is configured with (.ci/uv_args_from_pip.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HELPER = Path(__file__).resolve().parents[1] / ".ci" / "uv_args_from_pip.py"
spec = importlib.util.spec_from_file_location("uv_args_from_pip", HELPER)
helper = importlib.util.module_from_spec(spec)
spec.loader.exec_module(helper)

# `pip config list` on the test machine: a file config, then PIP_FIND_LINKS from the environment
LISTING = """\
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels /srv/more'
"""


def test_every_source_is_passed_and_later_settings_override():
    assert helper.uv_args(LISTING) == [
        "--index-strategy", "unsafe-best-match",
        "--index", "file:///opt/pypi/simple",
        "--index", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels",
        "--find-links", "/srv/more",
        "--constraints", "/etc/xdg/pip/constraints.txt",
    ]  # fmt: skip


def test_an_index_url_becomes_the_default_index_and_no_config_gives_pips_rule_only():
    assert helper.uv_args("user.index-url='https://mirror.example/simple'\n") == [
        "--index-strategy", "unsafe-best-match", "--default-index", "https://mirror.example/simple",
    ]  # fmt: skip
    assert helper.uv_args("") == ["--index-strategy", "unsafe-best-match"]
