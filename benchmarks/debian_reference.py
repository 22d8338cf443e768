"""The Debian Reference benchmark (issue 60) in one command: personal adapters on clients
that really differ, its control, and the classification variant.

    make data                                          # once: Debian's packages, prepared
    python benchmarks/debian_reference.py --dry-run    # the commands, without running them
    python benchmarks/debian_reference.py tune table control --seeds 0 1 2
    python benchmarks/debian_reference.py --measure    # one round of FedAvg, timed

Each part is one ``ray_jobs.reproduce`` call (every config x seed, then ``fedsim compare``'s
tables against FedAvg and Local) into ``runs/debian-<part>/``:

- ``tune``: each method's learning rate from a small grid, chosen on the validation loss on a
  seed of its own (``debian_tune.py``); the parts after it run each method at its chosen lr
  (``runs/debian-tune/configs/``, also when a later call runs them) and ``tune.md`` says the
  grid, the budget and the chosen values;
- ``table``: configs/debian/lm-*.yaml, next-token prediction in seven languages;
- ``control``: the same configs on the English clients only (``data.partition.values=[en-*]``),
  where there is no heterogeneity of language and a personal method's gain must vanish;
- ``cls``: configs/debian/cls-*.yaml, a paragraph's topic (its chapter) as the class, with
  label ids permuted per client, so one shared head cannot serve two clients;
- ``cls-control``: the same with one shared map of label ids (``data.permute_labels=false``):
  the label ids no longer differ, the label skew (a client's few topics) remains.

``--methods fedavg ditto`` runs only those methods (``lm-<method>.yaml``, ``cls-<method>.yaml``);
``--max-concurrent 1`` (passed on to reproduce) runs one run at a time. Each part prints the
CPU time of its runs (runs.csv's ``cpu_s``). ``--measure`` runs one round of
configs/debian/lm-fedavg.yaml and prints its wall time and CPU time, the cost per run to plan
a table with.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from benchmarks.debian_tune import (  # noqa: E402
    GRID,
    TUNE_SEED,
    choose,
    rounds_text,
    tune_markdown,
    tuned_configs,
    write_grid,
    write_tuned,
)

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs" / "debian"
PARTS: dict[str, tuple[str, list[str]]] = {  # part -> (config glob, overrides)
    "tune": ("lm-*.yaml", []),
    "table": ("lm-*.yaml", []),
    "control": ("lm-*.yaml", ["data.partition.values=[en-*]", "data.num_clients=4"]),
    "cls": ("cls-*.yaml", []),
    "cls-control": ("cls-*.yaml", ["data.permute_labels=false"]),
}


def part_configs(part: str, out: Path, methods: list[str] | None = None) -> list[Path]:
    """The part's configs (only ``methods``' where given), each replaced by its tuned twin
    where the tune step chose its lr (not in the tune part itself)."""
    pattern, _ = PARTS[part]
    configs = sorted(CONFIGS.glob(pattern))
    if methods:
        configs = [c for c in configs if c.stem.split("-", 1)[1] in methods]
    if part == "tune":
        return configs
    folder = out / "debian-tune" / "configs"
    tuned = tuned_configs(configs, folder)
    if PARTS[part][0] == PARTS["tune"][0]:  # the tuned methods' parts: say which lr each runs
        for config, used in zip(configs, tuned, strict=True):
            if used == config:
                print(f"note: {config.name} runs at its shipped lr: no tuned config in "
                      f"{folder} (run the tune part first, with the same --out)")  # fmt: skip
    return tuned


def command(part: str, seeds: list[int], out: Path, extra: list[str],
            methods: list[str] | None = None) -> list[str]:  # fmt: skip
    """The ``ray_jobs.reproduce`` command line of one part (the tune part: its grid, on
    ``TUNE_SEED``)."""
    _, overrides = PARTS[part]
    configs = part_configs(part, out, methods)
    if part == "tune":  # the grid, on a seed of its own (each config says its rounds)
        configs, seeds = write_grid(configs, out / "debian-tune" / "grid"), [TUNE_SEED]
    shown = [str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p) for p in configs]
    references = [] if part == "tune" else ["--reference", "fedavg", "--reference", "local"]
    return [sys.executable, "-m", "ray_jobs.reproduce", *shown, "--seeds", *map(str, seeds),
            "--out", str(out / f"debian-{part}"), *references, *overrides, *extra]  # fmt: skip


def runs_cpu(folder: Path) -> float:
    """The CPU seconds of the runs ``ray_jobs.reproduce`` last wrote to ``folder``'s runs.csv
    (``cpu_s``: each run's process; Ray's workers are no children of this one)."""
    path = folder / "runs.csv"
    if not path.is_file():
        return 0.0
    with open(path, newline="") as handle:
        return sum(float(r["cpu_s"]) for r in csv.DictReader(handle) if r.get("cpu_s"))


def after_tune(out: Path, methods: list[str] | None, cpu: float, wall: float) -> None:
    """Choose each method's lr from the grid's runs (every method a tune call of ``out`` has
    run, so calls for a few methods at a time add up); write the tuned configs and tune.md."""
    folder = out / "debian-tune"
    spent = folder / "budget.json"
    calls = json.loads(spent.read_text()) if spent.is_file() else []
    calls.append({"methods": methods or "all", "cpu_s": round(cpu), "wall_s": round(wall)})
    spent.write_text(json.dumps(calls, indent=1) + "\n")
    stems = sorted({p.name.rsplit("-lr", 1)[0] for p in (folder / "grid").glob("*.yaml")})
    configs = [CONFIGS / f"{stem}.yaml" for stem in stems]
    chosen = choose(folder / "runs", stems)
    write_tuned(chosen, configs, folder / "configs")
    budget = (f"{len(GRID) * len(configs)} runs of the table's setting for "
              f"{rounds_text(stems)} on seed {TUNE_SEED}, "
              f"{sum(c['cpu_s'] for c in calls)} CPU-s ({sum(c['wall_s'] for c in calls)} s "
              "wall)")  # fmt: skip
    (folder / "tune.md").write_text(tune_markdown(chosen, budget))
    print((folder / "tune.md").read_text())


def measure(out: Path) -> int:
    """One round of FedAvg on the benchmark: wall and CPU seconds (the child's)."""
    run = [sys.executable, "-m", "fedsim.cli", "run", str(CONFIGS / "lm-fedavg.yaml"),
           "rounds=1", "--out", str(out / "debian-measure"), "--overwrite",
           "--no-progress"]  # fmt: skip
    began = time.perf_counter()
    code = subprocess.call(run, cwd=REPO)
    wall = time.perf_counter() - began
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"one round of debian-lm-fedavg: {wall:.0f} s wall, "
          f"{used.ru_utime + used.ru_stime:.0f} s CPU (start-up included)")  # fmt: skip
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("parts", nargs="*",
                        default=["tune", "table", "control", "cls", "cls-control"],
                        help=f"which to run: {', '.join(PARTS)} (default: all)")  # fmt: skip
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=REPO / "runs")
    parser.add_argument("--methods", nargs="+", default=None,
                        help="only these methods (lm-<method>.yaml...; default: every one)")
    parser.add_argument("--max-concurrent", type=int, default=None, metavar="N",
                        help="runs at once, passed on to ray_jobs.reproduce (default: all fit)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--measure", action="store_true", help="time one round of FedAvg")
    args, extra = parser.parse_known_args(argv)  # the rest: overrides for every run
    if args.max_concurrent is not None:
        extra = [*extra, f"--max-concurrent={args.max_concurrent}"]
    if args.measure:
        return measure(args.out)
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        parser.error(f"parts={unknown[0]!r}: allowed: {', '.join(PARTS)}")
    if not (REPO / "data" / "debian-reference" / "debian-reference.parquet").is_file():
        print("note: data/debian-reference/debian-reference.parquet is missing: run `make "
              "data` first (the runs would stop on it)", file=sys.stderr)  # fmt: skip
    for part in args.parts:
        line = command(part, args.seeds, args.out, extra, args.methods)
        print(shlex.join(line))
        if args.dry_run:
            continue
        began = time.perf_counter()
        code = subprocess.call(line, cwd=REPO)
        cpu, wall = runs_cpu(args.out / f"debian-{part}"), time.perf_counter() - began
        print(f"debian-{part}: {cpu:.0f} CPU-s in the runs, {wall:.0f} s wall")
        if part == "tune":
            after_tune(args.out, args.methods, cpu, wall)
        if code != 0:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
