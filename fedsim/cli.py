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
import os
import sys
import typing
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

import fedsim
from fedsim.config import check_given_once, load_config
from fedsim.early_start import start_early
from fedsim.errors import ConfigError, RunFailure
from fedsim.interrupts import stop_reason, stop_signals
from fedsim.pretrained import quiet_progress_bars
from fedsim.run_folder import check_out_dir, default_run_dir
from fedsim.runtime.adapter_sample import add_sample_command
from fedsim.search.compare_command import add_compare_command
from fedsim.search.options import add_arguments as add_tune_arguments

SUMMARY_COLUMNS = ("acc_weighted", "acc_mean", "acc_std", "acc_worst10", "loss")
# shown when the run has them: held-out clients' accuracy and the gap, the global model's
EXTRA_COLUMNS = ("unseen/acc_weighted", "participation_gap", "global/acc_weighted",
                 "val/acc_weighted",  # and the validation split's (eval.validation_ratio)
                 "perplexity", "unseen/perplexity")  # next-token prediction


def summary_table(summary: dict, title: str) -> Table:
    """A run's best and final rounds (``fedsim run`` at the end, ``fedsim report``), one
    metric a row so the table stays within 80 columns whatever the run logged (held-out and
    global figures add rows, not columns); a value that is not a number (a summary.json
    edited by hand) shows as ``-``."""
    table = Table(title=title, min_width=min(len(title), 78))
    final = summary.get("final") if isinstance(summary.get("final"), dict) else {}
    columns = (*SUMMARY_COLUMNS, *(k for k in EXTRA_COLUMNS if k in final))
    whole = ("best", "best_on_test", "final")  # best_on_test: runs with validation only
    rows = [w for w in whole if isinstance(summary.get(w), dict) and summary[w]]
    table.add_column("")
    heads = {"best": f"best ({summary.get('selected_on', 'test')})", "best_on_test": "best (test)"}
    for which in rows:
        table.add_column(heads.get(which, which), justify="right")
    if rows:
        table.add_row("round", *(str(summary[w].get("round", "-")) for w in rows))
        for key in columns:
            table.add_row(key, *(_number(summary[w].get(key)) for w in rows))
    return table


def summary_title(name: object, algorithm: object, dataset: object) -> str:
    """The summary table's title: ``quickstart: fedavg on mnist-5k``."""
    return f"{name}: {algorithm} on {dataset}"


def _number(value: object) -> str:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return f"{value:.4f}" if ok else "-"


def cmd_run(args: argparse.Namespace) -> int:
    if args.print_config:  # the merged config, every default filled in, then exit
        check_given_once(args.overrides)
        cfg = load_config(args.config, args.overrides)
        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
        return 0
    search = [o for o in args.overrides if o.split("=", 1)[0].strip().startswith("tune.")]
    if search:
        key, _, value = search[0].partition("=")
        raise ConfigError(
            key.strip(), value, "a search option: fedsim run ignores the tune section; use "
            "fedsim tune (fedsim tune --help)",
        )  # fmt: skip
    check_given_once(args.overrides)
    cfg = load_config(args.config, args.overrides)
    if args.resume and args.overwrite:
        raise ConfigError("--overwrite", True, "cannot be combined with --resume")
    if args.out is not None and not args.out.strip():
        raise ConfigError("--out", args.out, "an empty path; give the run's folder")
    if not args.resume:  # before anything starts (the run checks it again), --check too
        run_dir = Path(args.out) if args.out is not None else default_run_dir(cfg)
        check_out_dir(run_dir, resume=False, overwrite=args.overwrite)
    if args.check:
        from fedsim.experiment import check_experiment

        print(check_experiment(cfg))
        return 0
    quiet_progress_bars(args.no_progress)  # the model loader's bars too (workers' as well)
    early = start_early(cfg, resume=args.resume)  # every check, then (on Ray) Ray's start
    from fedsim.experiment import RunInterrupted, run_experiment

    try:
        result = run_experiment(
            cfg,
            args.out,
            progress=not args.no_progress,
            resume=args.resume,
            overwrite=args.overwrite,
            simulation=early.simulation if early else None,
            pool=early.pool if early else None,
            executor_choice=early.choice if early else None,
        )
    except RunInterrupted as stop:
        print(f"fedsim: {stop.describe(resume_command(args, stop))}", file=sys.stderr)
        return stop.exit_code
    console = Console()
    title = summary_title(cfg.name, cfg.algorithm.name, cfg.data.name)
    console.print(summary_table(result.summary, title))
    console.print(f"results in {result.run_dir}/")
    return 0


def resume_command(args: argparse.Namespace, stop: object) -> str:
    """The exact command that continues an interrupted run."""
    import shlex

    out = getattr(stop, "run_dir", None) or args.out
    parts = ["fedsim", "run", args.config, *args.overrides, "--out", str(out), "--resume"]
    return " ".join(shlex.quote(str(p)) for p in parts)


def cmd_keys(args: argparse.Namespace) -> int:
    from fedsim.keys import (
        algorithm_names,
        overview,
        own_keys,
        render_markdown,
        render_text,
        select,
    )

    if args.section is None and not args.markdown:
        print(overview())
        return 0
    keys = select(args.section)
    print(render_markdown(keys) if args.markdown else render_text(keys))
    name = (args.section or "").removeprefix("algorithm.")
    if not args.markdown and (name in algorithm_names() or ":" in name):
        hidden = own_keys(name)[1]
        if hidden:
            group = hidden[0].group.split(" (")[0]
            names = ", ".join(k.key.removeprefix("algorithm.") for k in hidden)
            print(f"({group}: {names}; fedsim keys fedvg describes them)")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from fedsim.experiment import redraw_algorithm_plots
    from fedsim.tracking.report import load_run, write_report

    runs = []
    for run_dir in args.run_dirs:
        run = load_run(run_dir)
        runs.append(run)
        redrawn = redraw_algorithm_plots(run_dir)  # from a final checkpoint, if there is one
        for path in sorted({*write_report(run_dir, run), *redrawn}):
            print(path)
        print_summary(run.summary, run.config, run_dir)
    if args.compare is not None:
        from fedsim.tracking.compare_plot import plot_accuracy_vs_time

        print(plot_accuracy_vs_time(runs, Path(args.compare)))
    return 0


def print_summary(summary: dict, config: dict, run_dir: str) -> None:
    """``fedsim run``'s summary table of a run folder, with how the run ended unless it
    completed; a folder without a readable summary.json says so (one line on stderr)."""
    if not summary:
        print(f"fedsim: warning: {run_dir}: no readable summary.json (the run did not end?), "
              "so no summary table", file=sys.stderr)  # fmt: skip
        return
    title = summary_title(
        _section(config, "name") or Path(run_dir).name,
        _section(config, "algorithm", "name") or "?",
        _section(config, "data", "name") or "?",
    )
    status = summary.get("status")
    if status not in (None, "completed"):
        done = summary.get("rounds_completed")
        title += f" ({status}" + ("" if done is None else f" after {done} completed rounds") + ")"
    Console().print(summary_table(summary, title))


def _section(config: dict, *keys: str) -> object:
    """``config[key][...]``, or None where a level is missing or not a mapping."""
    value: object = config
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def cmd_tune(args: argparse.Namespace) -> int:
    from fedsim.search.sweep import run_from_args

    check_given_once(args.overrides)
    return run_from_args(args)


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


if __name__ == "__main__":
    sys.exit(main())
