"""The Debian Reference benchmark (issue 60) in one command: personal adapters on clients
that really differ, its control, and the classification variant.

    make data                                          # once: Debian's packages, prepared
    python benchmarks/debian_reference.py --dry-run    # the commands, without running them
    python benchmarks/debian_reference.py table control --seeds 0 1 2
    python benchmarks/debian_reference.py --measure    # one round of FedAvg, timed

Each part is one ``ray_jobs.reproduce`` call (every config x seed, then ``fedsim compare``'s
tables against FedAvg and Local) into ``runs/debian-<part>/``:

- ``table``: configs/debian/lm-*.yaml, next-token prediction in seven languages;
- ``control``: the same configs on the English clients only (``data.partition.values=[en-*]``),
  where there is no heterogeneity of language and a personal method's gain must vanish;
- ``cls``: configs/debian/cls-*.yaml, the language as the class with per-client label ids;
- ``cls-control``: the same with one shared map of label ids (``data.permute_labels=false``).

``--measure`` runs one round of configs/debian/lm-fedavg.yaml and prints its wall time and
CPU time, the cost per run to plan a table with (rounds x methods x seeds of it).
"""

from __future__ import annotations

import argparse
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs" / "debian"
PARTS: dict[str, tuple[str, list[str]]] = {  # part -> (config glob, overrides)
    "table": ("lm-*.yaml", []),
    "control": ("lm-*.yaml", ["data.partition.values=[en-*]", "data.num_clients=4"]),
    "cls": ("cls-*.yaml", []),
    "cls-control": ("cls-*.yaml", ["data.permute_labels=false"]),
}


def command(part: str, seeds: list[int], out: Path, extra: list[str]) -> list[str]:
    """The ``ray_jobs.reproduce`` command line of one part."""
    pattern, overrides = PARTS[part]
    configs = [str(p.relative_to(REPO)) for p in sorted(CONFIGS.glob(pattern))]
    return [sys.executable, "-m", "ray_jobs.reproduce", *configs, "--seeds",
            *map(str, seeds), "--out", str(out / f"debian-{part}"), "--reference", "fedavg",
            "--reference", "local", *overrides, *extra]  # fmt: skip


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
    parser.add_argument("parts", nargs="*", default=["table", "control", "cls", "cls-control"],
                        help=f"which to run: {', '.join(PARTS)} (default: all)")  # fmt: skip
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=REPO / "runs")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--measure", action="store_true", help="time one round of FedAvg")
    args, extra = parser.parse_known_args(argv)  # the rest: overrides for every run
    if args.measure:
        return measure(args.out)
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        parser.error(f"parts={unknown[0]!r}: allowed: {', '.join(PARTS)}")
    if not (REPO / "data" / "debian-reference" / "debian-reference.parquet").is_file():
        print("note: data/debian-reference/debian-reference.parquet is missing: run `make "
              "data` first (the runs would stop on it)", file=sys.stderr)  # fmt: skip
    for part in args.parts:
        line = command(part, args.seeds, args.out, extra)
        print(shlex.join(line))
        if not args.dry_run and subprocess.call(line, cwd=REPO) != 0:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
