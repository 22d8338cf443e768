"""The run folder: config.yaml, partition.json, metrics.jsonl, clients.csv, summary.json."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import IO, Any

import yaml

from fedsim.tracking.base import ClientRow, RoundRecord, Sink
from fedsim.tracking.client_names import client_names, name_of


class FileSink(Sink):
    """Writes every round as it happens, so a crashed run still shows how far it got."""

    def __init__(self) -> None:
        self._metrics: IO[str] | None = None
        self._clients: IO[str] | None = None
        self._writer: csv.DictWriter | None = None
        self._fields: list[str] = []
        self._names: dict[int, str] = {}

    def start(self, run_dir: Path, config: dict[str, Any], partition: dict[str, Any]) -> None:
        self.run_dir = run_dir
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        (run_dir / "partition.json").write_text(json.dumps(partition, indent=1))
        self._metrics = open(run_dir / "metrics.jsonl", "w")
        self._clients = open(run_dir / "clients.csv", "w", newline="")
        fields = [f.name for f in dataclasses.fields(ClientRow) if f.name != "train"]
        fields.remove("perplexity")  # beside loss once a row has one (next-token prediction)
        fields.remove("loss_sd")  # beside perplexity: the per-token losses' spread
        if (config.get("attack") or {}).get("kind", "none") == "none":
            fields.remove("attacked")  # the column exists in runs with an attack only
        evaluation = config.get("eval") or {}
        if not evaluation.get("holdout_clients") and not evaluation.get("holdout_names"):
            fields.remove("held_out")  # in runs with held-out clients only
        if evaluation.get("model", "personal") != "both":
            fields.remove("global_accuracy")  # in runs that evaluate both models only
        if not evaluation.get("validation_ratio"):
            fields.remove("val_accuracy")  # in runs with a validation split only
        if not evaluation.get("count_flops"):  # in runs that count them only
            fields.remove("flops")
            fields.remove("peak_memory_mib")  # (measured on a GPU; empty on a CPU)
        # the data's names for clients (a natural partition's writers, held-out clients' ids
        # as drawn): a client_name column beside client, in runs that have them only
        self._names = client_names(partition)
        if self._names:
            fields.insert(fields.index("client") + 1, "client_name")
        self._fields = fields
        self._writer = None  # the header waits for the first round: it names what was logged

    def log_round(self, record: RoundRecord) -> None:
        assert self._metrics and self._clients
        self._metrics.write(json.dumps({"round": record.round, **record.summary}) + "\n")
        self._metrics.flush()
        rows = [_flat_row(row) for row in record.clients]
        if self._names:
            for row in rows:
                row["client_name"] = name_of(self._names, row["client"])
        logged = sorted({k for r in rows for k in r if k.startswith("train/")})
        tokens = "perplexity" not in self._fields and any(
            r.get("perplexity") is not None for r in rows
        )  # fmt: skip
        if tokens:
            self._fields.insert(self._fields.index("loss") + 1, "perplexity")
            self._fields.insert(self._fields.index("perplexity") + 1, "loss_sd")
        if self._writer is None or tokens or not set(logged) <= set(self._fields):
            self._start_columns(logged)
        assert self._writer is not None
        self._writer.writerows(rows)
        self._clients.flush()

    def _start_columns(self, logged: list[str]) -> None:
        """Write the header (again, with the rows so far, when a new logged name appears)."""
        assert self._clients is not None
        old = [f for f in self._fields if f.startswith("train/")]
        fields = [f for f in self._fields if not f.startswith("train/")]
        self._fields = fields + sorted({*old, *logged})
        written = []
        if self._writer is not None:
            self._clients.close()
            with open(self.run_dir / "clients.csv", newline="") as handle:
                written = list(csv.DictReader(handle))
            self._clients = open(self.run_dir / "clients.csv", "w", newline="")
        self._writer = csv.DictWriter(self._clients, fieldnames=self._fields, extrasaction="ignore")
        self._writer.writeheader()
        self._writer.writerows(written)

    def finish(self, summary: dict[str, Any]) -> None:
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))

    def close(self) -> None:
        for handle in (self._metrics, self._clients):
            if handle is not None:
                handle.close()
        self._metrics = self._clients = None


def _flat_row(row: ClientRow) -> dict[str, Any]:
    """A clients.csv row: the ClientRow's columns, its logged values as train/<name>."""
    out = dataclasses.asdict(row)
    for name, value in (out.pop("train") or {}).items():
        out[f"train/{name}"] = value
    return out
