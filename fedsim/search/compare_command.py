"""``fedsim compare PATH... [--reference NAME ...] [--out DIR]``: run folders, or the folders
``ray_jobs.reproduce`` writes, side by side over seeds (``compare.py``, ``compare_table.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_compare(args: argparse.Namespace) -> int:
    """Write the comparison into ``--out`` and print the table and the files' paths."""
    from fedsim.search.compare import load_methods
    from fedsim.search.compare_table import write_comparison

    methods = load_methods(args.paths)
    single = len(args.paths) == 1 and (Path(args.paths[0]) / "runs").is_dir()
    out = Path(args.out) if args.out else Path(args.paths[0]) if single else Path("compare")
    check_out(out)
    written = write_comparison(methods, args.reference, out)
    print(written[0].read_text(), end="")
    for path in written:
        print(path)
    return 0


def check_out(out: Path) -> None:
    """``out`` can be a folder: it and the paths above it are folders or absent (a
    ConfigError naming ``--out`` otherwise, before anything is written)."""
    from fedsim.errors import ConfigError

    for path in (out / "plots", out, *out.parents):
        if path.exists() and not path.is_dir():
            raise ConfigError(
                "--out", str(out), f"{path} is a file, not a folder: give a folder for "
                "compare.md, compare.csv and plots/ (a new one, or one of earlier comparisons)",
            )  # fmt: skip


def add_compare_command(sub: Any) -> None:
    """The ``compare`` subcommand on the CLI's subparsers."""
    compare = sub.add_parser(
        "compare",
        help="run folders or reproduce folders side by side: intervals over seeds, paired "
        "tests, clients hurt against a reference, cost per client round",
    )
    compare.add_argument(
        "paths", nargs="+", metavar="PATH", help="run folders, folders of them, or "
        "ray_jobs.reproduce's --out folders",
    )  # fmt: skip
    compare.add_argument(
        "--reference", action="append", default=[], metavar="NAME",
        help="a method (its 'name (algorithm)' label, or its algorithm when one method has "
        "it) to count clients hurt and paired differences against; repeatable",
    )  # fmt: skip
    compare.add_argument(
        "--out", default=None, help="folder for compare.md, compare.csv and plots/ (default: "
        "the reproduce folder given, else ./compare)",
    )  # fmt: skip
    compare.set_defaults(func=cmd_compare, overrides=[])


__all__ = ["add_compare_command", "check_out", "cmd_compare"]
