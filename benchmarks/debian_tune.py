"""The Debian Reference benchmark's ``tune`` step: each method's learning rate from a small grid,
chosen on validation before the seeds run on test (``benchmarks/debian_reference.py tune``).

Every (method, lr) of ``GRID`` is one config, ``base:`` the method's own config with
``client.lr`` set, written to ``<out>/debian-tune/grid/``; one ``ray_jobs.reproduce`` call
runs them all on ``TUNE_SEED`` (a seed the table does not use), each for ``tune_rounds``
rounds (one; FedDPA two: its personal adapter first trains in round 1, so after one round it is
FedAvg to every digit), each picking its best round on the validation loss
(``eval.select_on: loss``, as every run of the table). A method's lr is the one whose run
reached the lowest validation loss (summary.json's ``best`` ``val/loss``; the test split
chooses nothing).
``<out>/debian-tune/configs/<stem>.yaml`` is then the method's config with that lr, which the
table and control parts run (``tuned_configs``), and ``tune.md`` says the grid, the budget
(runs, rounds, CPU time) and the chosen values.

Why a grid through ``ray_jobs.reproduce`` and not ``fedsim tune`` (Ray Tune): the search is
a fixed grid with no early stopping to gain from, and on a two-core machine Tune's driver and
its per-round checkpoints cost CPU the runs need; ``reproduce`` runs the same placement groups
one at a time (``--max-concurrent 1``) and selects on the same validation metric Tune would
(``--metric val/loss --mode min``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

GRID = (3e-3, 1e-2, 3e-2)  # AdamW learning rates around the shipped 1e-2
TUNE_SEED = 100  # not one of the table's seeds (0, 1, 2)
# the budget of a grid run: the first round of the table's setting (the table runs 3), the
# first rung of a successive-halving search, so that the grid costs about what one method's
# three seeds do on a two-core machine
TUNE_ROUNDS = 1
# methods whose personal part first trains after round 0 need more: FedDPA's personal pass
# starts in round 1 (the official code), and its global adapter trains as FedAvg's does
# (uniform mean = n-weighted on equal clients), so one round of FedDPA is FedAvg's run
TUNE_ROUNDS_BY_METHOD = {"feddpa": 2}


def method_of(stem: str) -> str:
    """``lm-feddpa`` -> ``feddpa``: the method of a config's stem."""
    return stem.split("-", 1)[-1]


def tune_rounds(stem: str) -> int:
    """The rounds of a grid run of the config ``stem``."""
    return TUNE_ROUNDS_BY_METHOD.get(method_of(stem), TUNE_ROUNDS)


def rounds_text(stems: list[str]) -> str:
    """The grid's budget in rounds: ``1 round`` or ``1 round (lm-feddpa: 2)``."""
    more = [f"{s}: {tune_rounds(s)}" for s in stems if tune_rounds(s) != TUNE_ROUNDS]
    plural = "" if TUNE_ROUNDS == 1 else "s"
    return f"{TUNE_ROUNDS} round{plural}" + (f" ({', '.join(more)})" if more else "")


def lr_name(lr: float) -> str:
    """``0.003`` -> ``3e-03``: a file-name-safe spelling of a learning rate."""
    return f"{lr:.0e}"


def write_grid(configs: list[Path], folder: Path, grid: tuple[float, ...] = GRID) -> list[Path]:
    """One config per (method, lr) under ``folder``: the method's config as ``base`` with
    ``client.lr``, its ``tune_rounds`` and a name of its own (each is a method of its own in
    the tables)."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for config in configs:
        name = yaml.safe_load(config.read_text()).get("name", config.stem)
        for lr in grid:
            path = folder / f"{config.stem}-lr{lr_name(lr)}.yaml"
            path.write_text(f"# {config.name} at lr {lr:g} (benchmarks/debian_tune.py)\n" + yaml.
                            safe_dump({"base": str(config.resolve()), "name": f"{name}-lr"
                                       f"{lr_name(lr)}", "client": {"lr": lr},
                                       "rounds": tune_rounds(config.stem)}))  # fmt: skip
            written.append(path)
    return written


def validation_loss(run_dir: Path) -> float:
    """A finished run's validation loss at its validation-selected round (nan if none)."""
    path = run_dir / "summary.json"
    if not path.is_file():
        return math.nan
    summary = json.loads(path.read_text())
    if summary.get("selected_on") != "validation":
        return math.nan
    return float((summary.get("best") or {}).get("val/loss", math.nan))


def choose(runs: Path, stems: list[str], seed: int = TUNE_SEED,
           grid: tuple[float, ...] = GRID) -> dict[str, dict]:  # fmt: skip
    """Per method stem: ``{"lr": chosen, "val_loss": {lr: loss}}``, the chosen lr the one of
    lowest validation loss among the grid's finished runs (None when none finished)."""
    chosen = {}
    for stem in stems:
        losses = {lr: validation_loss(runs / f"{stem}-lr{lr_name(lr)}-seed{seed}") for lr in grid}
        done = {lr: v for lr, v in losses.items() if math.isfinite(v)}
        chosen[stem] = {"lr": min(done, key=done.get) if done else None, "val_loss": losses}
    return chosen


def write_tuned(chosen: dict[str, dict], configs: list[Path], folder: Path) -> list[Path]:
    """``folder/<stem>.yaml``: each tuned method's config with its chosen lr (same name, so
    the table's methods keep their labels)."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for config in configs:
        lr = chosen.get(config.stem, {}).get("lr")
        if lr is None:
            continue
        path = folder / config.name
        path.write_text(f"# {config.name} with the lr chosen on validation (debian_tune.py)\n"
                        + yaml.safe_dump({"base": str(config.resolve()),
                                          "client": {"lr": lr}}))  # fmt: skip
        written.append(path)
    return written


def tuned_configs(configs: list[Path], folder: Path) -> list[Path]:
    """Each config replaced by its tuned twin in ``folder`` where the tune step wrote one."""
    return [folder / c.name if (folder / c.name).is_file() else c for c in configs]


def tune_markdown(chosen: dict[str, dict], budget: str, grid: tuple[float, ...] = GRID) -> str:
    """The grid, the budget and, per method, each lr's validation loss and the chosen lr."""
    heads = " | ".join(f"val loss at lr {lr:g}" for lr in grid)
    lines = [f"Learning rate per method, chosen on validation: grid {list(grid)} (AdamW), "
             f"{budget}. The lowest validation loss (nats/token, at the run's "
             "validation-selected round) wins; the test split chooses nothing.\n",
             f"| method | {heads} | chosen lr |", "|---|" + "---:|" * (len(grid) + 1)]  # fmt: skip
    for stem, c in chosen.items():
        cells = [f"{c['val_loss'][lr]:.4f}" if math.isfinite(c["val_loss"][lr]) else "-"
                 for lr in grid]  # fmt: skip
        lr = "-" if c["lr"] is None else f"{c['lr']:g}"
        lines.append(f"| {stem} | " + " | ".join(cells) + f" | {lr} |")
    return "\n".join(lines) + "\n"


__all__ = ["GRID", "TUNE_ROUNDS", "TUNE_ROUNDS_BY_METHOD", "TUNE_SEED",
           "choose", "rounds_text", "tune_markdown", "tune_rounds", "tuned_configs",
           "write_grid", "write_tuned"]  # fmt: skip
