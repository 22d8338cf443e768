"""fedsim: federated-learning experiments from one YAML config.

  fedsim run CONFIG [key=value ...] [--out DIR] [--resume | --overwrite] [--check]
                                 [--print-config]
  fedsim keys [SECTION]          algorithms, models, datasets; a section's or algorithm's keys
  fedsim report RUN_DIR ...      redraw a run folder's plots
  fedsim compare PATH ...        runs or reproduce folders side by side, over seeds
  fedsim sample RUN_DIR --prompt TEXT [--client NAME]   text from a run's LoRA adapter
  fedsim tune CONFIG --search key=space ... [--samples N] [--scheduler asha|fifo|pbt]
  fedsim tune --resume DIR       continue an interrupted search

Any config key can be overridden as dotted.key=value (YAML values); 'fedsim keys' lists them.
"""

from __future__ import annotations

import argparse
import typing

import fedsim
from fedsim.cli.commands import cmd_keys, cmd_report, cmd_run, cmd_tune
from fedsim.runtime.adapter_sample import add_sample_command
from fedsim.search.compare_command import add_compare_command
from fedsim.search.options import add_arguments as add_tune_arguments


def search_doc() -> str:
    import fedsim.search

    return plain(fedsim.search.__doc__.split("\n\n- ")[0])


def plain(text: str) -> str:
    """Help text without reStructuredText markup (a terminal shows backticks literally)."""
    return text.replace("``", "").replace("`", "")


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr (exit 2), like config errors."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"fedsim: error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(text: str) -> str:
    """``text`` with control and other unprintable characters escaped: one terminal line."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="fedsim", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"fedsim {fedsim.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    run = sub.add_parser(
        "run",
        help="run an experiment from a YAML config",
        description="Run an experiment. Every config key, its default and allowed values: "
        "'fedsim keys' (or 'fedsim keys data', 'fedsim keys fedper'); also in the docs, "
        "docs/reference/config-keys.md (generated from the same source).",
    )
    run.add_argument("config", help="YAML experiment config")
    run.add_argument(
        "overrides",
        nargs="*",
        help="dotted overrides, e.g. rounds=50 client.lr=0.01 (see fedsim keys)",
    )
    run.add_argument("--out", default=None, help="run folder (default runs/<name>)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its newest checkpoint (rounds may grow)",
    )
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in --out (the folder is cleared first)",
    )
    run.add_argument(
        "--print-config",
        action="store_true",
        help="print the fully merged config (bases, overrides, every default) and exit",
    )
    run.add_argument(
        "--check",
        action="store_true",
        help="validate the config and build the federation, model and algorithm; run nothing",
    )
    run.set_defaults(func=cmd_run)
    keys = sub.add_parser(
        "keys",
        help="list config keys: type, default, allowed values, meaning",
        description="Every config key, generated from fedsim's config classes. SECTION: a "
        "dotted prefix (data, data.partition, client, runtime, tracking...) or an algorithm "
        "name (fedper, fedvg...) for its algorithm.<key> settings.",
    )
    keys.add_argument("section", nargs="?", default=None, help="e.g. runtime, fedper")
    keys.add_argument("--markdown", action="store_true", help="a Markdown table")
    keys.set_defaults(func=cmd_keys, overrides=[])
    report = sub.add_parser("report", help="draw a run folder's plots into RUN_DIR/plots/")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="e.g. runs/quickstart")
    report.add_argument(
        "--compare",
        metavar="PNG",
        help="also draw every run's accuracy on one figure: against virtual time for runs "
        "with a clock (sim_time), against rounds for the others",
    )
    report.set_defaults(func=cmd_report, overrides=[])
    tune = sub.add_parser(
        "tune",
        help="Ray Tune search: one full simulation per trial",
        description=search_doc(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_tune_arguments(tune)
    tune.set_defaults(func=cmd_tune)
    add_compare_command(sub)  # fedsim compare (fedsim/search/compare_command.py)
    add_sample_command(sub)  # fedsim sample (fedsim/runtime/adapter_sample.py)
    return parser
