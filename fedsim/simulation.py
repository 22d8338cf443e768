"""One experiment built: data, model, algorithm, deployment options, round kind, loop.

``Simulation(cfg)`` builds everything that can fail on bad input (the dataset and its
partition, the model, the algorithm, the options checked against each other); ``run``
hands the rounds to the one ``RoundLoop`` (``fedsim/rounds/``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.algorithms.base import Algorithm, FederationInfo
from fedsim.algorithms.registry import get_algorithm_class
from fedsim.checkpoint import Checkpoint
from fedsim.config import ExperimentConfig
from fedsim.data.assemble import assemble_data, build_data, cached_dataset
from fedsim.data.federated import FederatedData
from fedsim.data.names import TOKENIZED_MODELS
from fedsim.deployment.driver import Deployment
from fedsim.errors import ConfigError
from fedsim.interrupts import Interruption
from fedsim.pretrained import check_lora_rank, is_without_weights
from fedsim.rounds.clock.build import trace_mapping
from fedsim.rounds.clock.sync import sample_cohort
from fedsim.rounds.compose import build_round_kind, check_round_kind, round_kind_name
from fedsim.rounds.evaluation import check_evaluation
from fedsim.rounds.loop import RoundLoop
from fedsim.rounds.result import RunResult
from fedsim.run_plan import ModelBuild, resolve_run_plan
from fedsim.runtime.adapter_export import AdapterExport, start_adapter
from fedsim.runtime.executor import Executor
from fedsim.runtime.model_contract import check_model, model_notes
from fedsim.runtime.model_fit import build_client_model, fit_model, sample_batch, starting_lr
from fedsim.runtime.worker import WorkerSpec
from fedsim.tracking.base import Sink
from fedsim.tracking.client_names import client_names
from lightning_modules.blocks import block_parameters, head_parameters
from lightning_modules.flat_params import ParamLayout, flatten_module

__all__ = ["RunResult", "Simulation", "build_data", "cached_dataset"]


def federation_info(
    module: Any, data: FederatedData, cfg: ExperimentConfig | None = None
) -> FederationInfo:
    """What the algorithm may know of the federation (``cfg``: the client settings; None:
    the defaults, one epoch each, batch 10)."""
    blocks = block_parameters(module)
    sizes = data.train_sizes()
    batch_size = 10 if cfg is None else cfg.client.batch_size
    clusters = data.partition.get("client_clusters")
    return FederationInfo(
        layout=ParamLayout.from_module(module),
        num_clients=data.num_clients,
        num_classes=data.num_classes,
        train_sizes=sizes,
        class_counts=data.class_counts("train"),
        head_names=head_parameters(module, 1),
        block_names=list(blocks),
        block_parameters=blocks,
        client_train_indices=[c.train for c in data.clients],
        client_clusters=clusters if clusters is None else clusters[: data.num_clients],
        newcomer_clusters=clusters if clusters is None else clusters[data.num_clients :],
        partition=str(data.partition.get("name", "")),
        batch_size=batch_size,
        buffer_names=[n for n, b in module.named_buffers() if b.is_floating_point()],
        batchnorm_names=batchnorm_names(module),
        adapters=module.adapter_parts() if hasattr(module, "adapter_parts") else None,
    )


def batchnorm_names(module: Any) -> list[str]:
    """The parameters and float buffers of every BatchNorm layer of ``module``."""
    names = []
    for prefix, layer in module.named_modules():
        if isinstance(layer, torch.nn.modules.batchnorm._BatchNorm):
            own = [*layer.named_parameters(recurse=False), *layer.named_buffers(recurse=False)]
            dot = f"{prefix}." if prefix else ""
            names += [dot + n for n, t in own if t.is_floating_point()]
    return names


def runs_on_cuda(cfg: ExperimentConfig) -> bool:
    """Whether the clients will train on a GPU (as far as the config and this machine tell)."""
    r = cfg.runtime
    if r.device.startswith("cuda"):
        return True
    if r.device == "cpu":
        return False
    return torch.cuda.is_available() or (r.gpus_per_worker or 0) > 0 or r.address is not None


class Simulation:
    """One experiment: everything that can fail on bad input is built in ``__init__``."""

    template_weights = False  # the driver's template: a pretrained base's structure only

    def __init__(self, cfg: ExperimentConfig, data: FederatedData | None = None):
        self.cfg = cfg
        if cfg.model.name in TOKENIZED_MODELS:  # the LoRA rank against the base, before the data
            check_lora_rank(cfg.model.args or {})
        # the data (or ``data``), its validation splits and held-out clients (data/assemble.py)
        self.data = assemble_data(cfg, data)
        if cfg.eval.select_on == "perplexity" and not getattr(self.data.dataset, "next_token", 0):
            raise ConfigError(
                "eval.select_on", "perplexity", f"needs next-token prediction, and "
                f"{self.data.dataset.name} has classes: allowed here: auto, loss, accuracy",
            )  # fmt: skip
        torch.manual_seed(cfg.seed)
        # how every copy of the model is built, resolved once (the run plan carries it)
        model = ModelBuild.from_config(cfg, self.data.dataset.model_kwargs())
        # the driver runs no model: a pretrained base's structure only (weights=False)
        template = build_client_model(model, weights=self.template_weights)
        sample = sample_batch(self.data)
        # one forward: the model fits the data (one line if not); lazy layers materialize. A
        # module over a pretrained base without its weights checked its shapes as it was
        # built; the workers, which hold the weights, run this forward too
        if not is_without_weights(template):
            fit_model(template, sample, self.data.num_classes, cfg.model.name)
        self.initial_params = flatten_module(template)
        self.template = template  # adapters.*: the peft model that reads and writes adapters
        if cfg.adapters.start_from is not None:
            self.initial_params = start_adapter(template, self.initial_params,
                                                cfg.adapters.start_from)  # fmt: skip
        self.federation = federation_info(template, self.data, cfg)
        algo_cls = get_algorithm_class(cfg.algorithm.name)
        self.algorithm: Algorithm = algo_cls(cfg.algorithm.params, self.federation)
        device = "cuda" if runs_on_cuda(cfg) else "cpu"
        check_model(cfg, template, self.algorithm, device, sample)
        self.base_lr = starting_lr(cfg.client.lr, template)
        self.notes = model_notes(cfg, template, self.algorithm)
        for note in self.notes:  # what of the user's module this algorithm does not use
            print(f"fedsim: note: {note}", file=sys.stderr)
        d = cfg.data
        self.data = self.algorithm.prepare_data(
            self.data, lambda name: cached_dataset(name, d.root, d.download), cfg.seed
        )
        # every per-round and per-client setting, resolved once (fedsim/run_plan.py); how
        # rounds train, chosen once: local | exchange | buffered (fedsim/rounds/compose.py)
        kind = round_kind_name(cfg, self.algorithm)
        check_round_kind(cfg, self.algorithm, kind, self.data.num_clients)
        check_evaluation(cfg, self.algorithm, kind, self.data)
        self.plan = resolve_run_plan(cfg, kind, self.data.num_clients, self.base_lr, model)
        self.deployment = Deployment(cfg, self.algorithm, self.plan)
        self.round_kind = build_round_kind(
            cfg, self.algorithm, self.plan, self.deployment, self.data.train_sizes(),
            self.model_bytes,
        )  # fmt: skip
        self.interrupted: Interruption | None = None
        self.worker_spec = WorkerSpec.from_plan(self.plan, self.algorithm)
        if cfg.adapters.save_every > 0 and self.adapter_export().skip_reason is not None:
            raise ConfigError("adapters.save_every", cfg.adapters.save_every,
                              f"{self.adapter_export().skip_reason}: nothing to write")  # fmt: skip

    def write_adapters(self, run_dir: Path, result: RunResult) -> dict[str, Any] | None:
        """The final adapters under ``run_dir/adapters`` (None: the model has none to write;
        a note on stderr where it has an adapter that peft cannot hold)."""
        export = self.adapter_export()
        if export.skip_reason is not None:
            if export.peft_model is not None:
                print(f"fedsim: note: no adapters/ folder: {export.skip_reason}", file=sys.stderr)
            return None
        return export.write(run_dir / "adapters", result.state, result.client_store,
                            self.cfg.rounds)  # fmt: skip

    def adapter_export(self) -> AdapterExport:
        """What writes this run's adapters as peft folders (``adapters``), clients named as
        partition.json names them."""
        return AdapterExport(self.template, self.algorithm, client_names(self.partition_info()))

    def model_bytes(self) -> np.ndarray:
        """What each client downloads in round 0 (the broadcast and its payload): an
        asynchronous schedule times a transfer of this size each way."""
        state = self.algorithm.init_state(self.initial_params)
        broadcast = self.algorithm.broadcast(state)
        return np.array([
            self.algorithm.download_nbytes(broadcast, self.algorithm.client_payload(state, c), None)
            for c in range(self.plan.num_clients)
        ], dtype=np.float64)  # fmt: skip

    def partition_info(self) -> dict[str, Any]:
        """partition.json: the data's partition, the attackers (an attack), and the trace
        entry each client took (``system.*_trace``)."""
        info = self.deployment.partition_info(self.data.partition_summary())
        traces = trace_mapping(self.cfg, self.plan.num_clients)
        if traces:
            info["system"] = traces
        return info

    def sample_cohort(self, round_idx: int) -> list[int]:
        """``int(join_ratio * clients)`` clients (at least 1), seeded by (seed, round)."""
        return sample_cohort(
            self.cfg.seed, round_idx, range(self.plan.num_clients), self.plan.cohort_size
        )

    def run(
        self,
        executor: Executor,
        sinks: list[Sink] | None = None,
        *,
        run_dir: Path | None = None,
        resume: Checkpoint | None = None,
    ) -> RunResult:
        """Run every round through ``executor``; feed ``sinks``; return the summary.

        With ``run_dir`` and ``checkpoint_every`` > 0, checkpoints go to ``run_dir``; with
        ``resume``, the run continues from that checkpoint (its rounds replayed to the sinks).
        """
        num_classes = (self.data.class_counts("train", newcomers=True) > 0).sum(axis=1)
        loop = RoundLoop(
            self.cfg, self.algorithm, self.round_kind, self.deployment, num_classes,
            self.sample_cohort, self.plan, getattr(self.data.dataset, "next_token", False),
        )  # fmt: skip
        self.loop = loop
        every = self.cfg.adapters.save_every
        if run_dir is not None and every > 0:
            export = self.adapter_export()
            loop.after_commit = lambda done, state, store: (
                export.write(run_dir / "adapters" / f"round-{done}", state, store, done)
                if done % every == 0 and done < self.cfg.rounds
                else None
            )
        try:
            return loop.run(executor, self.initial_params, sinks, run_dir=run_dir, resume=resume)
        finally:
            self.interrupted = loop.interrupted
