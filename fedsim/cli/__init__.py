"""fedsim's command line (``fedsim``, ``python -m fedsim.cli``): ``parser.py`` reads the
arguments (the sub-commands' parsers; its docstring is ``fedsim --help``), ``commands.py`` runs
them, ``summary.py`` draws a run's summary table; ``main`` answers a bad input, a failed
run and an interrupt in one line each. Imports no torch (a config mistake is answered first).
"""

from __future__ import annotations

import argparse
import os
import sys

from fedsim.cli.commands import cmd_keys, cmd_report, cmd_run, cmd_tune, resume_command
from fedsim.cli.parser import OneLineParser, build_parser, one_line
from fedsim.cli.summary import EXTRA_COLUMNS, SUMMARY_COLUMNS, print_summary, summary_table
from fedsim.errors import ConfigError, RunFailure
from fedsim.interrupts import stop_reason, stop_signals


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # bare `fedsim`: the help, not an error
        parser.print_help()
        return 0
    try:
        return _main(parser, argv)
    except BrokenPipeError:  # `fedsim keys | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    args, extra = parser.parse_known_args(argv)
    unknown = [e for e in extra if e.startswith("-") or "=" not in e]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if extra:  # key=value overrides given after an option
        args.overrides = [*args.overrides, *extra]
    try:
        with stop_signals():  # SIGTERM before the rounds start stops as Ctrl-C does
            return args.func(args)
    except KeyboardInterrupt as stop:  # before any round ran (a run reports its own)
        terminated = stop_reason(stop) == "SIGTERM"
        how = "terminated (SIGTERM)" if terminated else "interrupted"
        where = " before any round finished; nothing to resume" if args.command == "run" else ""
        print(f"fedsim: {how}{where}", file=sys.stderr)
        return 143 if terminated else 130
    except ConfigError as err:
        print(f"fedsim: error: {one_line(err)}", file=sys.stderr)
        return 2
    except RunFailure as err:  # clients diverged, a spilled state changed on disk
        print(f"fedsim: error: {one_line(err)}", file=sys.stderr)
        return 1


__all__ = [
    "EXTRA_COLUMNS", "SUMMARY_COLUMNS", "OneLineParser", "build_parser", "cmd_keys",
    "cmd_report", "cmd_run", "cmd_tune", "main", "one_line", "print_summary",
    "resume_command", "summary_table",
]  # fmt: skip
