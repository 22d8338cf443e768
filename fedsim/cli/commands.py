"""What each sub-command does once its arguments are read (``parser.py``): ``fedsim run``,
``keys``, ``report`` and ``tune`` (``compare`` and ``sample`` live with what they drive). The
heavy parts (torch, Ray) are imported by the command that needs them, never at import."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml
from rich.console import Console

from fedsim.cli.summary import print_summary, summary_table, summary_title
from fedsim.config import check_given_once, load_config
from fedsim.data.dataset_files import check_files_without_download
from fedsim.early_start import start_early
from fedsim.errors import ConfigError
from fedsim.pretrained import quiet_progress_bars
from fedsim.run_folder import check_out_dir, default_run_dir


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
    # missing files with the download off: one line in a second, not after torch and the model
    check_files_without_download(cfg.data.name, cfg.data.root, cfg.data.download)
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
    from fedsim.run_figures import redraw_algorithm_plots
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


def cmd_tune(args: argparse.Namespace) -> int:
    from fedsim.search.sweep import run_from_args

    check_given_once(args.overrides)
    return run_from_args(args)
