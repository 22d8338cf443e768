"""How a bad value is shown in a one-line error: whole when it is a path, cut when huge."""

from __future__ import annotations

from fedsim.errors import SHOWN_CHARS, ConfigError, show_value


def test_a_long_path_is_shown_whole():
    path = "/mnt/nfs/" + "/".join(["experiments-of-a-lab"] * 9) + "/config.yaml"
    assert 150 < len(path) < SHOWN_CHARS
    assert show_value(path) == repr(path)
    assert str(ConfigError("config", path, "a symlink loop")) == f"config={path!r}: a symlink loop"


def test_a_huge_value_is_cut_and_counted_on_one_line():
    text = show_value("x" * 1_000_001)
    assert len(text) < SHOWN_CHARS + 40 and "\n" not in text
    assert text.endswith("... (1,000,003 characters)")  # the quotes counted
    assert show_value(2**5000) == "5001-bit integer"
