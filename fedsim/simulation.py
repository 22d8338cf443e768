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
from fedsim.config.evaluation import holdout_count
from fedsim.data.assemble import build_data, cached_dataset
from fedsim.data.federated import FederatedData
from fedsim.data.holdout import hold_out
from fedsim.data.validation import carve_validation
from fedsim.deployment.driver import Deployment
from fedsim.interrupts import Interruption
from fedsim.pretrained import is_without_weights, without_weights
from fedsim.rounds.clock_build import trace_mapping
from fedsim.rounds.compose import build_round_kind, check_round_kind, round_kind_name
from fedsim.rounds.evaluation import check_evaluation
from fedsim.rounds.loop import RoundLoop
from fedsim.rounds.result import RunResult
from fedsim.rounds.system_clock import sample_cohort
from fedsim.run_plan import ModelBuild, resolve_run_plan
from fedsim.runtime.executor import Executor
from fedsim.runtime.model_contract import check_model, model_notes
from fedsim.runtime.model_fit import build_client_model, fit_model, sample_batch, starting_lr
from fedsim.runtime.worker import WorkerSpec
from fedsim.tracking.base import Sink
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

    def __init__(self, cfg: ExperimentConfig, data: FederatedData | None = None):
        self.cfg = cfg
        self.data = data if data is not None else build_data(cfg)
        # eval.validation_ratio: each client's validation split, out of its train split
        self.data = carve_validation(self.data, cfg.eval.validation_ratio, cfg.seed)
        # eval.holdout_clients: the federation is the rest; held-out clients follow it
        held = holdout_count(cfg.eval.holdout_clients, self.data.num_clients)
        self.data = hold_out(self.data, held, cfg.seed)
        torch.manual_seed(cfg.seed)
        # how every copy of the model is built, resolved once (the run plan carries it)
        model = ModelBuild.from_config(cfg, self.data.dataset.model_kwargs())
        with without_weights():  # the driver runs no model: a pretrained base's structure
            template = build_client_model(model)
        sample = sample_batch(self.data)
        # one forward: the model fits the data (one line if not); lazy layers materialize. A
        # module over a pretrained base without its weights checked its shapes as it was
        # built; the workers, which hold the weights, run this forward too
        if not is_without_weights(template):
            fit_model(template, sample, self.data.num_classes, cfg.model.name)
        self.initial_params = flatten_module(template)
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
        try:
            return loop.run(executor, self.initial_params, sinks, run_dir=run_dir, resume=resume)
        finally:
            self.interrupted = loop.interrupted
