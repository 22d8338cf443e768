"""The experiment config: the run's own keys and one of each section."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from fedsim.checks import checked
from fedsim.config.adapters import AdaptersConfig
from fedsim.config.asynchronous import AsyncConfig
from fedsim.config.client import ClientConfig
from fedsim.config.data import DataConfig
from fedsim.config.deployment import (
    AggregationConfig,
    AttackConfig,
    CompressionConfig,
    PrivacyConfig,
)
from fedsim.config.evaluation import EvalConfig
from fedsim.config.sections import AlgorithmConfig, ModelConfig, RuntimeConfig, is_run_name
from fedsim.config.system import SystemConfig
from fedsim.config.tracking import TrackingConfig
from fedsim.schedules import Schedule


@dataclass
class ExperimentConfig:
    name: str = checked(  # the run folder's name: runs/<name>
        "experiment",
        is_run_name,
        "must be a folder name: no '/' or '\\', not starting with '.', at most 200 bytes",
    )
    seed: int = checked(  # seeds the partition, the client sampling and the model's weights
        0, lambda v: 0 <= v < 2**63, "must be in [0, 2^63) (torch and numpy take 64-bit seeds)"
    )
    rounds: int = checked(20, lambda v: v >= 1, "must be >= 1")  # communication rounds
    join_ratio: float = checked(  # share of the clients sampled each round
        1.0, lambda v: 0 < v <= 1, "must be in (0, 1]"
    )
    eval_every: int = checked(  # evaluate every N rounds (and after the last)
        1, lambda v: v >= 1, "must be >= 1"
    )
    checkpoint_every: int = checked(  # save the full state every N rounds and after the last
        0, lambda v: v >= 0, "must be >= 0 (0: no checkpoints)"
    )
    max_failed_fraction: float = checked(  # stop if more of a cohort has non-finite losses
        0.5, lambda v: 0 <= v <= 1, "must be in [0, 1]"
    )
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    aggregation: AggregationConfig = field(default_factory=AggregationConfig)
    attack: AttackConfig = field(default_factory=AttackConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    asynchronous: AsyncConfig = field(default_factory=AsyncConfig)
    system: SystemConfig = field(default_factory=SystemConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    adapters: AdaptersConfig = field(default_factory=AdaptersConfig)

    @property
    def schedules(self) -> dict[str, Schedule]:
        """The keys given as schedules (``fedsim/schedules.py``), by dotted key; their fields
        hold round 0's value, and the run plan resolves every round's."""
        return self.__dict__.setdefault("_schedules", {})

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (the resolved config.yaml); algorithm params inlined, a
        scheduled key's schedule in place of its round-0 value."""
        out = dataclasses.asdict(self)
        params = out["algorithm"].pop("params") or {}
        out["algorithm"].update(params)
        for key, schedule in self.schedules.items():
            section, name = key.split(".")
            out[section][name] = schedule.to_dict()
        return out
