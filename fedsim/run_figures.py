"""A run's plots at its end: the ``fedsim report`` plots and the algorithm's own figures of
its final state, drawn again by ``fedsim report`` from a run's final checkpoint. A plotting
error is printed, never raised: the run's results are already saved.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fedsim.algorithms.base import Algorithm, ClientStates, ServerState
from fedsim.checkpoint import newest_readable_checkpoint
from fedsim.errors import ConfigError
from fedsim.tracking.plots import figure_context, write_figures


def write_report_safely(run_dir: Path) -> list[Path]:
    """The report plots; a plotting error is printed, never raised (the results are saved)."""
    from fedsim.tracking.report import write_report

    try:
        return write_report(run_dir)
    except Exception as err:  # noqa: BLE001 - plots must not fail a finished run
        print(f"fedsim: report plots failed: {err.__class__.__name__}: {err}", file=sys.stderr)
        return []


def write_algorithm_figures(
    run_dir: str | Path,
    algorithm: Algorithm,
    state: ServerState,
    client_states: ClientStates,
    config: dict[str, Any],
) -> list[Path]:
    """The algorithm's own figures of its final ``state`` into ``run_dir/plots/``.

    ``config`` is the run's (resolved) config dict: the figures show round ``rounds``. An
    error is printed, never raised: the run's results are already saved.
    """
    rounds = config["rounds"]
    try:
        figures = algorithm.figures(state, client_states, rounds)
    except Exception as err:  # noqa: BLE001 - plots must not fail a finished run
        print(f"fedsim: algorithm figures failed: {err.__class__.__name__}: {err}", file=sys.stderr)
        return []
    context = figure_context(config["name"], config["algorithm"]["name"], rounds)
    return write_figures(Path(run_dir) / "plots", figures, context)


def redraw_algorithm_plots(run_dir: str | Path) -> list[Path]:
    """The algorithm's end-of-run figures (cwFedAvg's row norms) again, from the final checkpoint.

    Needs only the checkpoint (it holds the algorithm, the server state and every client's
    state): no dataset, no simulation. Returns [] when there is no readable checkpoint (a
    damaged or refused one is a one-line warning), when the newest readable one is not the
    run's last (``checkpoint_every`` > 0 and the run finished), or when it predates
    checkpoints that hold the algorithm. The checkpoint may reference the modules of the
    algorithm and model that ``run_dir/config.yaml`` names by import path.
    """
    import yaml

    try:
        config = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        config = None
    try:
        checkpoint, _, damaged = newest_readable_checkpoint(run_dir, config)
    except ConfigError as err:  # it names code fedsim does not load
        print(f"fedsim: warning: {err.allowed} ({err.value}); figures not redrawn", file=sys.stderr)
        return []
    if damaged:  # an older checkpoint does not hold the final state: nothing to redraw
        reasons = "; ".join(f"{err.path} is damaged ({err.reason})" for err in damaged)
        print(f"fedsim: warning: {reasons}; figures not redrawn", file=sys.stderr)
        return []
    if checkpoint is None:
        return []
    if checkpoint.algorithm is None or checkpoint.rounds_trained != checkpoint.config["rounds"]:
        return []
    return write_algorithm_figures(
        run_dir, checkpoint.algorithm, checkpoint.state, checkpoint.client_states, checkpoint.config
    )
