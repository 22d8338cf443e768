"""``fedsim run CONFIG [key=value ...] [--out DIR]``, ``fedsim report RUN_DIR ...``,
``fedsim tune CONFIG --search key=space ... [--samples N] [--scheduler asha|fifo]``."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from fedsim.config import load_config
from fedsim.errors import ClientFailureError, ConfigError


def summary_table(summary: dict, title: str) -> Table:
    table = Table(title=title)
    for col in ("", "round", "acc_weighted", "acc_mean", "acc_std", "acc_worst10", "loss"):
        table.add_column(col, justify="right")
    for which in ("best", "final"):
        row = summary.get(which) or {}
        if row:
            table.add_row(
                which,
                str(row["round"]),
                *(
                    f"{row[k]:.4f}"
                    for k in ("acc_weighted", "acc_mean", "acc_std", "acc_worst10", "loss")
                ),
            )
    return table


def cmd_run(args: argparse.Namespace) -> int:
    from fedsim.experiment import run_experiment

    cfg = load_config(args.config, args.overrides)
    result = run_experiment(cfg, args.out, progress=not args.no_progress, resume=args.resume)
    console = Console()
    console.print(
        summary_table(result.summary, f"{cfg.name}: {cfg.algorithm.name} on {cfg.data.name}")
    )
    console.print(f"results in {result.run_dir}/")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from fedsim.experiment import redraw_algorithm_plots
    from fedsim.tracking.report import write_report

    for run_dir in args.run_dirs:
        redrawn = redraw_algorithm_plots(run_dir)  # from a final checkpoint, if there is one
        for path in sorted({*write_report(run_dir), *redrawn}):
            print(path)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from ray_jobs.tune import run_from_args

    return run_from_args(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedsim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run an experiment from a YAML config")
    run.add_argument("config", help="YAML experiment config")
    run.add_argument("overrides", nargs="*", help="dotted overrides, e.g. rounds=50 client.lr=0.01")
    run.add_argument("--out", default=None, help="run folder (default runs/<name>)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its newest checkpoint (rounds may grow)",
    )
    run.set_defaults(func=cmd_run)
    report = sub.add_parser("report", help="draw a run folder's plots into RUN_DIR/plots/")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="e.g. runs/quickstart")
    report.set_defaults(func=cmd_report, overrides=[])
    tune = sub.add_parser("tune", help="Ray Tune search: one full simulation per trial")
    from ray_jobs.tune import add_arguments

    add_arguments(tune)
    tune.set_defaults(func=cmd_tune)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    unknown = [e for e in extra if e.startswith("-") or "=" not in e]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if extra:  # key=value overrides given after an option
        args.overrides = [*args.overrides, *extra]
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"fedsim: error: {err}", file=sys.stderr)
        return 2
    except ClientFailureError as err:
        print(f"fedsim: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
