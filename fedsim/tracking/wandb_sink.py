"""Weights & Biases sink: per-round summaries, per-client charts, config, partition, plots.

Everything about clients is one section, ``clients/``: ``clients/accuracy``, ``clients/loss``,
``clients/weight`` (and, for next-token prediction, ``clients/perplexity``) are one multi-line
chart each (``wandb.plot.line_series``: a line per client, clients
``0..max_client_series-1``), ``clients/accuracy_distribution`` a histogram per round and
``clients/table`` every evaluated client's row (clients.csv). A chart is a table plus its panel
spec, so it works offline and syncs with the run; it is logged again at rounds 1, 2, 4, 8...
and at the end, so a running run shows it and all its tables together hold at most twice the
final one's rows.

The W&B run lives in ``<run_dir>/wandb/``. ``mode: online`` falls back to offline when there
is no API key or the W&B host cannot be reached (``wandb_mode.resolve_mode``), and says how
to ``wandb sync`` later. ``WANDB_MODE=offline`` / ``disabled`` in the environment override an
``online`` config.
Nothing here may fail or block the experiment: any W&B error is reported once on stderr and
the sink goes quiet. After the run the W&B service process is stopped (``wandb.teardown``)
unless another W&B run of this process is still active.

``fedsim.tracking.wandb_offline.read_offline_run`` reads an offline run back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fedsim.config import WandbConfig
from fedsim.tracking.base import RoundRecord, Sink
from fedsim.tracking.client_names import client_names, name_of
from fedsim.tracking.wandb_mode import resolve_mode

CLIENT_TABLE_COLUMNS = ["client", "round", "accuracy", "loss", "n", "classes", "weight"]
# metrics.jsonl keys drawn together in the evaluation/seen_vs_unseen panel
EVALUATION_LINES = {
    "acc_weighted": "trained clients",
    "unseen/acc_weighted": "held-out clients",
    "global/acc_weighted": "global model",
}
SECTION = "clients"  # every per-client panel: clients/accuracy, clients/loss, ...
# one multi-line chart each (perplexity: next-token prediction only, where rows have one)
CLIENT_CHARTS = ("accuracy", "loss", "weight", "perplexity")


def _warn(message: str) -> None:
    print(f"fedsim: W&B: {message}", file=sys.stderr, flush=True)


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class WandbSink(Sink):
    """Mirrors the run folder into a W&B run; every call is guarded (never raises)."""

    def __init__(self, cfg: WandbConfig, *, name: str | None = None) -> None:
        self.cfg, self.name = cfg, name
        self.run: Any = None
        self.mode = "disabled"
        self.offline_dir: Path | None = None
        self._wandb: Any = None
        self._table: Any = None
        self._incremental = False
        self._rows: list[list[Any]] = []
        self._finished = False
        self._last_step = 0
        # per-client series of the charts: metric -> client -> [(round, value)]
        self._series: dict[str, dict[int, list[tuple[int, float]]]] = {m: {} for m in CLIENT_CHARTS}
        self._charted = -1  # the round the charts were last logged at
        # seen / unseen / global weighted accuracy per evaluated round (eval.*): one panel
        self._evaluation: dict[str, list[tuple[int, float]]] = {}
        self._names: dict[int, str] = {}  # client_names (set by start)
        self._columns = list(CLIENT_TABLE_COLUMNS)

    # --- guarded calls ---
    def _guard(self, what: str, fn: Any, *args: Any) -> None:
        if self.run is None:
            return
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - W&B must never fail the experiment
            _warn(f"{what} failed ({err.__class__.__name__}: {err}); W&B logging stops here")
            self._abandon()

    def _abandon(self) -> None:
        run, self.run = self.run, None
        try:
            if run is not None:
                run.finish(exit_code=1)
        except Exception:  # noqa: BLE001
            pass

    # --- Sink ---
    def start(self, run_dir: Path, config: dict[str, Any], partition: dict[str, Any]) -> None:
        """Open the W&B run in ``run_dir/wandb``; on any failure continue without W&B."""
        self.run_dir = Path(run_dir)
        self._names = client_names(partition)  # client_name: the data's names for clients
        self._columns = CLIENT_TABLE_COLUMNS + ["client_name"] * bool(self._names)
        self.mode, reason = resolve_mode(self.cfg.mode)
        if self.mode == "disabled":
            return
        if self.cfg.mode == "online" and self.mode == "offline":
            _warn(f"logging offline ({reason})")
        try:
            import wandb

            self._wandb = wandb
            self.run = self._init(config, partition)
        except Exception as err:  # noqa: BLE001
            if self.mode == "online":
                _warn(f"online init failed ({err.__class__.__name__}: {err}); logging offline")
                self.mode = "offline"
                try:
                    self.run = self._init(config, partition)
                except Exception as err2:  # noqa: BLE001
                    _warn(f"disabled ({err2.__class__.__name__}: {err2})")
            else:
                _warn(f"disabled ({err.__class__.__name__}: {err})")
        if self.run is not None:
            self.offline_dir = Path(self.run.dir).parent
            self._guard("partition summary", self._log_partition, partition)

    def _init(self, config: dict[str, Any], partition: dict[str, Any]) -> Any:
        wandb = self._wandb
        (self.run_dir / "wandb").mkdir(parents=True, exist_ok=True)
        # tracking.wandb.params (a search's sampled values) as top-level keys beside the
        # config's own sections, for W&B's runs table and parallel coordinates
        run_config = {**self.cfg.params, **config}
        run_config["partition_stats"] = {
            k: partition.get(k) for k in ("dataset", "num_clients", "num_classes", "partition")
        } | {"stats": partition.get("stats", {})}
        settings = wandb.Settings(console="off", silent=True, init_timeout=60, save_code=False)
        run = wandb.init(
            project=self.cfg.project,
            entity=self.cfg.entity,
            group=self.cfg.group,
            tags=list(self.cfg.tags) or None,
            name=self.name or self.run_dir.name,
            dir=str(self.run_dir),
            mode=self.mode,
            config=run_config,
            settings=settings,
            reinit="create_new",
        )
        run.define_metric("round")
        return run

    def _log_partition(self, partition: dict[str, Any]) -> None:
        wandb = self._wandb
        for key, value in (partition.get("stats") or {}).items():
            self.run.summary[f"partition/{key}"] = value
        rows = [
            [
                c["client"],
                c["train"],
                c["test"],
                sum(1 for n in c["train_class_counts"] if n > 0),
                json.dumps(c["train_class_counts"]),
            ]
            for c in partition.get("clients", [])
        ]
        columns = ["client", "train", "test", "classes", "train_class_counts"]
        self.run.log({"partition": wandb.Table(columns=columns, data=rows)}, step=0, commit=False)

    def log_round(self, record: RoundRecord) -> None:
        """Summary scalars, client histogram, per-client series and table rows at step=round."""
        self._guard("log_round", self._log_round, record)

    def _log_round(self, record: RoundRecord) -> None:
        wandb = self._wandb
        data: dict[str, Any] = {"round": record.round}
        for key, value in record.summary.items():
            if _numeric(value):
                data[key] = value
        data["num_failed"] = len(record.summary.get("failed_clients") or [])
        rows = [
            [c.client, c.round, c.accuracy, c.loss, c.n, c.classes, c.weight]
            + [name_of(self._names, c.client)] * bool(self._names)
            for c in sorted(record.clients, key=lambda c: c.client)
        ]
        for key, label in EVALUATION_LINES.items():
            if _numeric(record.summary.get(key)):
                self._evaluation.setdefault(label, []).append((record.round, record.summary[key]))
        members = [c for c in record.clients if not c.held_out]  # the clients that train
        if rows and members:
            accuracies = [c.accuracy for c in members]
            data[f"{SECTION}/accuracy_distribution"] = wandb.Histogram(
                accuracies, num_bins=min(64, len(members))
            )
            for c in members:
                if c.client < self.cfg.max_client_series:
                    values = {"accuracy": c.accuracy, "loss": c.loss, "weight": c.weight,
                              "perplexity": c.perplexity}  # fmt: skip
                    for metric, value in values.items():
                        if value is not None:
                            series = self._series[metric].setdefault(c.client, [])
                            series.append((record.round, float(value)))
        if rows:
            self._add_rows(rows, data)
        if record.round > 0 and record.round & (record.round - 1) == 0:  # 1, 2, 4, 8...
            self._add_charts(data, record.round)
        self.run.log(data, step=record.round)
        self._last_step = record.round

    def _add_charts(self, data: dict[str, Any], round_idx: int) -> None:
        """One multi-line chart per CLIENT_CHARTS metric: a line per client, x = round."""
        wandb = self._wandb
        for metric, by_client in self._series.items():
            clients = sorted(by_client)
            if not clients:
                continue
            data[f"{SECTION}/{metric}"] = wandb.plot.line_series(
                xs=[[r for r, _ in by_client[c]] for c in clients],
                ys=[[v for _, v in by_client[c]] for c in clients],
                keys=[f"client {name_of(self._names, c)}" for c in clients],
                title=f"{metric} per client",
                xname="round",
            )
        if len(self._evaluation) > 1:  # seen beside unseen (or the global model's)
            labels = list(self._evaluation)
            data["evaluation/seen_vs_unseen"] = wandb.plot.line_series(
                xs=[[r for r, _ in self._evaluation[k]] for k in labels],
                ys=[[v for _, v in self._evaluation[k]] for k in labels],
                keys=labels,
                title="accuracy: trained clients, held-out clients, global model",
                xname="round",
            )
        self._charted = round_idx

    def _add_rows(self, rows: list[list[Any]], data: dict[str, Any]) -> None:
        """Incremental table (only new rows each round) where wandb has it, else one at the end."""
        wandb = self._wandb
        if self._table is None and not self._rows:
            try:
                self._table = wandb.Table(columns=self._columns, log_mode="INCREMENTAL")
                self._incremental = True
            except TypeError:
                self._incremental = False
        if self._incremental:
            for row in rows:
                self._table.add_data(*row)
            data[f"{SECTION}/table"] = self._table
        else:
            self._rows.extend(rows)

    def finish(self, summary: dict[str, Any]) -> None:
        """Best and final summaries into the run summary."""
        self._guard("finish", self._finish, summary)
        self._finished = True

    def _finish(self, summary: dict[str, Any]) -> None:
        # best_on_test: runs with validation; cost: with eval.count_flops (per client round)
        for which in ("best", "final", "best_on_test", "cost"):
            for key, value in (summary.get(which) or {}).items():
                self.run.summary[f"{which}/{key}"] = value
        self.run.summary["selected_on"] = summary.get("selected_on", "test")  # best's selection

    def _log_leftovers(self) -> None:
        wandb = self._wandb
        data: dict[str, Any] = {}
        if self._rows:  # no incremental tables in this wandb: every row in one table
            data[f"{SECTION}/table"] = wandb.Table(columns=self._columns, data=self._rows)
        if self._charted != self._last_step:  # the charts with every round, also of a stopped run
            self._add_charts(data, self._last_step)
        if self._finished:
            for path in sorted((self.run_dir / "plots").glob("*.png")):
                data[f"plots/{path.stem}"] = wandb.Image(str(path))
        if data:
            self.run.log(data, step=self._last_step)

    def close(self) -> None:
        """The charts, plots (when the run finished); finish the W&B run; stop wandb's service
        process."""
        if self._wandb is None:  # never imported: nothing started
            return
        self._guard("plots", self._log_leftovers)
        wandb, self._wandb = self._wandb, None
        run, self.run = self.run, None
        if run is not None:
            try:
                run.finish(exit_code=0 if self._finished else 1)
            except Exception as err:  # noqa: BLE001
                _warn(f"finish failed ({err.__class__.__name__}: {err})")
        try:
            if getattr(wandb, "run", None) is None:  # no other W&B run of this process is active
                wandb.teardown()
        except Exception:  # noqa: BLE001
            pass
        if self.mode == "offline" and self.offline_dir is not None:
            _warn(f"offline run in {self.offline_dir}; upload with: wandb sync {self.offline_dir}")
