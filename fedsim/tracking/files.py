"""The run folder: config.yaml, partition.json, metrics.jsonl, clients.csv, summary.json."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import IO, Any

import yaml

from fedsim.tracking.base import ClientRow, RoundRecord, Sink


class FileSink(Sink):
    """Writes every round as it happens, so a crashed run still shows how far it got."""

    def __init__(self) -> None:
        self._metrics: IO[str] | None = None
        self._clients: IO[str] | None = None
        self._writer: csv.DictWriter | None = None

    def start(self, run_dir: Path, config: dict[str, Any], partition: dict[str, Any]) -> None:
        self.run_dir = run_dir
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        (run_dir / "partition.json").write_text(json.dumps(partition, indent=1))
        self._metrics = open(run_dir / "metrics.jsonl", "w")
        self._clients = open(run_dir / "clients.csv", "w", newline="")
        fields = [f.name for f in dataclasses.fields(ClientRow)]
        if (config.get("attack") or {}).get("kind", "none") == "none":
            fields.remove("attacked")  # the column exists in runs with an attack only
        self._writer = csv.DictWriter(self._clients, fieldnames=fields, extrasaction="ignore")
        self._writer.writeheader()

    def log_round(self, record: RoundRecord) -> None:
        assert self._metrics and self._writer and self._clients
        self._metrics.write(json.dumps({"round": record.round, **record.summary}) + "\n")
        self._metrics.flush()
        self._writer.writerows(dataclasses.asdict(row) for row in record.clients)
        self._clients.flush()

    def finish(self, summary: dict[str, Any]) -> None:
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))

    def close(self) -> None:
        for handle in (self._metrics, self._clients):
            if handle is not None:
                handle.close()
        self._metrics = self._clients = None
