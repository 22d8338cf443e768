"""startup.json: where a Ray run's start went, in seconds since its process started.

Steps (those that happened, in order): ``driver_ready`` (the driver imported torch and built
the data, model and algorithm), ``ray_started`` (Ray joined or started),
``actors_created``, ``actors_ready`` (every worker imported and built its module),
``first_client_done`` (the first client trained), ``first_round_done``. From ``fedsim run``
the process start is the command; from a notebook it is the kernel's start.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil


def startup_seconds(timeline: dict[str, float], process_start: float) -> dict[str, float]:
    """Each step's ``time.time()`` as seconds since ``process_start``, in time order."""
    steps = sorted(timeline.items(), key=lambda item: item[1])
    return {f"{name}_s": round(at - process_start, 3) for name, at in steps}


def write_startup(run_dir: Path, executor: Any, **steps: float) -> Path | None:
    """``run_dir/startup.json``: the executor's ``timeline`` and ``steps`` (None: no timeline)."""
    timeline = getattr(executor, "timeline", None)
    if not timeline:
        return None
    timeline = {**timeline, **steps}
    path = Path(run_dir) / "startup.json"
    process_start = psutil.Process().create_time()
    path.write_text(json.dumps(startup_seconds(timeline, process_start), indent=2) + "\n")
    return path
