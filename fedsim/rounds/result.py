"""What a finished (or stopped) run hands back: its summary, history and final state."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsim.storage import ClientStateStore


@dataclass
class RunResult:
    summary: dict[str, Any]  # best and final (summary.json)
    history: list[dict[str, Any]]  # one summary per round (metrics.jsonl)
    state: dict[str, Any]  # the final server state
    run_dir: Path | None = None
    client_store: ClientStateStore = field(default_factory=ClientStateStore)
