"""Run configs x seeds on a Ray cluster and tabulate mean ± std, as the papers' tables do.

    python -m ray_jobs.reproduce configs/cwfedavg/fmnist-pat-*.yaml --seeds 0 1 2 \\
        --out runs/repro-fmnist rounds=100

    ray job submit --working-dir . -- \\
        python -m ray_jobs.reproduce configs/a.yaml configs/b.yaml --seeds 0 1 2

Arguments containing ``=`` are dotted overrides applied to every config. Every (config,
seed) is one Ray task in its own placement group (``fedsim.search.resources``, as ``fedsim
tune``'s trials: the local executor in one bundle of ``runtime.cpus_per_worker`` CPUs; with
``--trial-executor ray``, the default when ``runtime.gpus_per_worker > 0``, a Ray worker pool
of ``runtime.workers`` bundles, a number that must be given), so runs share a cluster
without oversubscribing it (``--max-concurrent N``: at most N at once, e.g. one run at a
time on a shared machine). Connects to ``--address`` / ``RAY_ADDRESS``, else starts a local Ray.

Writes ``<out>/runs/<config>-seed<k>/`` run folders, ``<out>/runs.csv`` (one row per run,
with ``cpu_s``, the CPU seconds of the process that ran it),
``<out>/results.csv`` (mean and std per config) and ``<out>/results.md`` (percent,
``mean ± std`` over seeds: the sample std of ``fedsim.search.stats``, as in every results
table; with one seed the std is nan and the table shows the mean alone; "best" says what it
was selected on), followed by ``fedsim compare``'s tables of the same runs (also in
``compare.md``, ``compare.csv`` and ``plots/``): 95 % intervals, FLOPs and bytes per client
round, and, against each ``--reference`` method (default: FedAvg and Local where the runs
have one), clients hurt and paired differences with a paired t test. On a multi-node
cluster ``--out`` and ``data.root`` must be paths every node shares. Runs with
``tracking.wandb.enabled=true`` share one W&B group (``tracking.wandb.group`` or
``reproduce-<time>``) and carry ``config_file`` and ``seed`` as top-level W&B config keys.
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsim.config import config_from_dict, load_config
from fedsim.errors import ConfigError
from fedsim.plugins import config_plugin_paths
from fedsim.search.compare import Method, load_methods
from fedsim.search.compare_table import write_comparison
from fedsim.search.resources import check_fits, trial_bundles, trial_executor_for, trial_runtime
from fedsim.search.space import with_values
from fedsim.search.stats import format_mean_std, mean_std

COLUMNS = (
    ("best", "acc_weighted"),
    ("final", "acc_weighted"),
    ("final", "acc_mean"),
    ("final", "acc_worst10"),
)


@dataclass
class ReproduceOutcome:
    """Per-config rows (mean/std), per-run errors (None: ok) and the output folder."""

    rows: list[dict]
    errors: list[str | None]
    out_dir: Path


@dataclass
class RunSpec:
    """One (config, seed) run: its validated raw config and run folder."""

    config: str
    label: str
    seed: int
    raw: dict[str, Any]
    run_dir: str


def run_one(raw: dict[str, Any], run_dir: str) -> dict[str, Any]:
    """Ray task body: one full experiment; returns its ``{"best", "final"}`` summary with
    ``cpu_s``, the CPU time (user + system, every thread) of the process that ran it."""
    from fedsim.experiment import run_experiment

    logging.getLogger("lightning").setLevel(logging.ERROR)
    began = time.process_time()
    result = run_experiment(config_from_dict(raw), run_dir, progress=False)
    return {**result.summary, "cpu_s": time.process_time() - began}


def plan_runs(
    configs: list[str],
    seeds: list[int],
    overrides: list[str],
    out: Path,
    trial_executor: str,
    wandb_group: str | None = None,
) -> list[RunSpec]:
    """Validate every (config, seed) before Ray starts; name their run folders. Runs with
    W&B share ``wandb_group`` (unless their config names one) and carry their config file
    as a top-level W&B config key (``config_file``; ``seed`` is one already)."""
    specs = []
    for config in configs:
        for seed in seeds:
            cfg = load_config(config, [*overrides, f"seed={seed}"])
            executor = trial_executor_for(cfg.runtime, trial_executor)
            raw = cfg.to_dict()
            raw["data"]["root"] = str(Path(raw["data"]["root"]).resolve())
            raw = with_values(raw, trial_runtime(cfg.runtime, executor))
            if cfg.tracking.wandb.enabled:
                wandb = raw["tracking"]["wandb"]
                wandb["group"] = wandb["group"] or wandb_group
                wandb["tags"] = [*wandb["tags"], "reproduce"]
                wandb["params"] = {**wandb["params"], "config_file": str(config)}
            config_from_dict(raw)
            label = f"{cfg.name} ({cfg.algorithm.name})"
            run_dir = out / "runs" / f"{Path(config).stem}-seed{seed}"
            specs.append(RunSpec(config, label, seed, raw, str(run_dir)))
    return specs


def aggregate(specs: list[RunSpec], summaries: list[dict[str, Any] | None]) -> list[dict]:
    """One row per config: seeds done and mean/std of every COLUMNS entry."""
    rows = []
    for config in dict.fromkeys(s.config for s in specs):
        done = [
            (spec, summary)
            for spec, summary in zip(specs, summaries, strict=True)
            if spec.config == config and summary
        ]
        label = next(s.label for s in specs if s.config == config)
        row: dict[str, Any] = {"config": config, "label": label, "seeds": len(done)}
        for which, key in COLUMNS:
            values = [summary[which].get(key, math.nan) for _, summary in done]
            row[f"{which}_{key}_mean"], row[f"{which}_{key}_std"] = mean_std(values)
        rows.append(row)
    return rows


def selection(summaries: list[dict[str, Any] | None]) -> str:
    """What the runs' "best" was selected on: validation, test, or both (mixed runs)."""
    chosen = {s.get("selected_on", "test") for s in summaries if s}
    return " or ".join(sorted(chosen)) or "test"


def markdown_table(rows: list[dict], selected_on: str = "test") -> str:
    """Accuracy in percent as ``mean ± std`` (the mean alone for one seed); the best
    round's header says what it was ``selected_on``."""
    heads = [f"{which} {key}" + (f" (selected on {selected_on})" if which == "best" else "")
             for which, key in COLUMNS]  # fmt: skip
    lines = [
        "| config | seeds | " + " | ".join(heads) + " |",
        "|---|---:|" + "---:|" * len(heads),
    ]
    for row in rows:
        cells = [
            format_mean_std(row[f"{which}_{key}_mean"], row[f"{which}_{key}_std"])
            for which, key in COLUMNS
        ]
        lines.append(f"| {row['label']} | {row['seeds']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def default_references(methods: list[Method]) -> list[str]:
    """FedAvg and Local, where exactly one method of the runs has that algorithm."""
    return [a for a in ("fedavg", "local") if [m.algorithm for m in methods].count(a) == 1]


def write_results(
    out: Path,
    specs: list[RunSpec],
    summaries: list[dict | None],
    errors: list[str | None],
    references: list[str] | None = None,
) -> list[dict]:
    """runs.csv, results.csv and results.md (with ``fedsim compare``'s tables of the runs
    that finished, against ``references``) in ``out``; returns the per-config rows."""
    with open(out / "runs.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["config", "seed", *(f"{w}_{k}" for w, k in COLUMNS), "cpu_s",
                         "run_dir", "error"])  # fmt: skip
        for spec, summary, error in zip(specs, summaries, errors, strict=True):
            values = [(summary or {}).get(w, {}).get(k, "") for w, k in COLUMNS]
            cpu = (summary or {}).get("cpu_s", "")
            cpu = f"{cpu:.1f}" if isinstance(cpu, float) else cpu
            writer.writerow([spec.config, spec.seed, *values, cpu, spec.run_dir, error or ""])
    rows = aggregate(specs, summaries)
    with open(out / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    text = markdown_table(rows, selection(summaries))
    done = [spec.run_dir for spec, summary in zip(specs, summaries, strict=True) if summary]
    if done:
        try:  # a bad --reference must not lose the runs' own table
            methods = load_methods(done)
            refs = default_references(methods) if references is None else references
            write_comparison(methods, refs, out)
            text += "\n" + (out / "compare.md").read_text()
        except ConfigError as err:
            print(f"reproduce: no comparison: {err}", file=sys.stderr)
    (out / "results.md").write_text(text)
    return rows


def reproduce(
    configs: list[str],
    seeds: list[int],
    overrides: list[str],
    out: str | Path | None = None,
    *,
    address: str | None = None,
    trial_executor: str = "auto",
    references: list[str] | None = None,
    max_concurrent: int | None = None,
) -> ReproduceOutcome:
    """Run every (config, seed) on Ray, at most ``max_concurrent`` at once (None: as many
    as fit); write the tables; return rows and per-run errors."""
    if max_concurrent is not None and max_concurrent < 1:
        raise ConfigError("--max-concurrent", max_concurrent, "must be >= 1 (or left out)")
    if not configs:
        raise ConfigError("configs", configs, "give at least one YAML config")
    if not seeds:
        raise ConfigError("--seeds", seeds, "give at least one seed")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = Path(out if out is not None else Path("runs") / f"reproduce-{stamp}").resolve()
    specs = plan_runs(configs, seeds, overrides, out_dir, trial_executor, f"reproduce-{stamp}")
    out_dir.mkdir(parents=True, exist_ok=True)

    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from fedsim.runtime.ray_cluster import join_or_start_ray

    # the user's own model, dataset or algorithm (import paths) must import in every task
    plugins = config_plugin_paths(
        *(spec.raw[section]["name"] for spec in specs for section in ("model", "data", "algorithm"))
    )
    started = join_or_start_ray(address, py_modules=plugins)
    groups: dict[int, Any] = {}
    try:
        task = ray.remote(run_one)

        def submit(i: int) -> Any:
            """Run ``specs[i]`` in its own placement group."""
            cfg = config_from_dict(specs[i].raw)
            bundles = trial_bundles(cfg.runtime, cfg.runtime.executor)
            groups[i] = group = placement_group(bundles, strategy="PACK")
            strategy = PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=0, placement_group_capture_child_tasks=True
            )
            return task.options(
                num_cpus=bundles[0]["CPU"],
                num_gpus=bundles[0].get("GPU", 0),
                scheduling_strategy=strategy,
                max_retries=0,
            ).remote(specs[i].raw, specs[i].run_dir)

        for spec in specs:  # every run fits the cluster, before the first starts
            cfg = config_from_dict(spec.raw)
            check_fits(trial_bundles(cfg.runtime, cfg.runtime.executor), ray.cluster_resources())
        summaries: list[dict | None] = [None] * len(specs)
        errors: list[str | None] = [None] * len(specs)
        waiting = list(range(len(specs)))
        at_once = max_concurrent or len(specs)
        index = {submit(i): i for i in waiting[:at_once]}  # ref -> spec
        waiting = waiting[at_once:]
        pending = list(index)
        while pending:  # free each run's placement group as soon as it ends
            done, pending = ray.wait(pending, num_returns=1)
            i = index[done[0]]
            try:
                summaries[i] = ray.get(done[0])
            except Exception as err:  # noqa: BLE001 - one failed seed must not lose the rest
                message = str(err).strip().splitlines()[-1] if str(err).strip() else repr(err)
                errors[i] = f"{err.__class__.__name__}: {message}"
                print(f"reproduce: {specs[i].run_dir} failed: {errors[i]}", file=sys.stderr)
            remove_placement_group(groups.pop(i))
            if waiting:  # the next run, as one ends (--max-concurrent)
                nxt = waiting.pop(0)
                ref = submit(nxt)
                index[ref] = nxt
                pending.append(ref)
    finally:
        for group in groups.values():
            try:
                remove_placement_group(group)
            except Exception:  # noqa: BLE001
                pass
        if started:
            ray.shutdown()
    rows = write_results(out_dir, specs, summaries, errors, references)
    return ReproduceOutcome(rows=rows, errors=errors, out_dir=out_dir)


def main(argv: list[str] | None = None) -> int:
    """CLI: configs and key=value overrides, ``--seeds``, ``--out``, ``--address``."""
    parser = argparse.ArgumentParser(prog="python -m ray_jobs.reproduce", description=__doc__)
    parser.add_argument("items", nargs="+", metavar="CONFIG|key=value")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", default=None, help="output folder (default runs/reproduce-T)")
    parser.add_argument("--address", default=None, help="Ray cluster (default RAY_ADDRESS)")
    parser.add_argument("--trial-executor", default="auto", help="auto | local | ray (per run)")
    parser.add_argument("--max-concurrent", type=int, default=None, metavar="N",
                        help="runs at once (default: as many as the cluster fits)")  # fmt: skip
    parser.add_argument("--reference", action="append", default=None, metavar="NAME",
                        help="method to count clients hurt and paired differences against "
                        "(repeatable; default fedavg and local where present)")  # fmt: skip
    args = parser.parse_intermixed_args(argv)
    configs = [item for item in args.items if "=" not in item]
    overrides = [item for item in args.items if "=" in item]
    try:
        outcome = reproduce(
            configs,
            args.seeds,
            overrides,
            args.out,
            address=args.address,
            trial_executor=args.trial_executor,
            references=args.reference,
            max_concurrent=args.max_concurrent,
        )
    except ConfigError as err:
        print(f"reproduce: error: {err}", file=sys.stderr)
        return 2
    print((outcome.out_dir / "results.md").read_text(), end="")
    print(f"tables: {outcome.out_dir / 'results.md'}, {outcome.out_dir / 'results.csv'}")
    return 1 if any(outcome.errors) else 0


if __name__ == "__main__":
    sys.exit(main())
