"""A progress bar over rounds that shows the latest accuracy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from fedsim.tracking.base import RoundRecord, Sink


class ProgressSink(Sink):
    """rich progress bar: training rounds done out of ``rounds``, elapsed/remaining time, the
    last evaluated accuracy."""

    def __init__(self, total_rounds: int, description: str = "rounds") -> None:
        self.total, self.description = total_rounds, description
        self.progress: Progress | None = None

    def start(self, run_dir: Path, config: dict[str, Any], partition: dict[str, Any]) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[acc]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        self.task = self.progress.add_task(self.description, total=self.total, acc="")
        self.progress.start()

    def log_round(self, record: RoundRecord) -> None:
        assert self.progress is not None
        fields = {}
        if "acc_weighted" in record.summary:
            s = record.summary
            fields["acc"] = f"acc {s['acc_weighted']:.4f} (mean {s['acc_mean']:.4f})"
            if "unseen/acc_weighted" in s:  # held-out clients
                fields["acc"] += f", unseen {s['unseen/acc_weighted']:.4f}"
        for warning in record.summary.get("warnings", []):
            self.progress.console.print(f"[yellow]round {record.round}: warning: {warning}")
        # the final, evaluation-only round (round == rounds) trains nothing: no step
        self.progress.update(self.task, advance=int(record.round < self.total), **fields)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
