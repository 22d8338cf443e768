"""Print the uv arguments that give uv the package sources pip is configured with.

`make setup` installs with uv: on the 2-core test machine it installs the dev environment
in ~30 s (bytecode is written at first import: Makefile) where pip takes ~125 s (the
pinned torch is a CUDA build, ~6 GB unpacked). uv does not read pip's configuration
(pip.conf, PIP_* variables), so the index, extra indexes, find-links folders and constraint
files pip would use are handed to it here: both install the same releases from the same
places. Where pip has none configured, nothing
is printed but pip's own resolution rule (the best match across all indexes).
"""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys

# pip's option -> uv's option; the order is the order of the printed arguments
UV_OPTION = {
    "index-url": "--default-index",
    "extra-index-url": "--index",
    "find-links": "--find-links",
    "constraint": "--constraints",
}


def uv_args(pip_config_list: str) -> list[str]:
    """uv arguments for the output of `pip config list` (later lines override, as in pip)."""
    values: dict[str, list[str]] = {}
    for line in pip_config_list.splitlines():
        name, sep, quoted = line.partition("=")
        option = name.rsplit(".", 1)[-1]
        if sep and option in UV_OPTION:
            values[option] = ast.literal_eval(quoted).split()
    args = ["--index-strategy", "unsafe-best-match"]
    for option, uv_option in UV_OPTION.items():
        for value in values.get(option, []):
            args += [uv_option, value]
    return args


def main() -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    print(shlex.join(uv_args(listing)))


if __name__ == "__main__":
    main()
