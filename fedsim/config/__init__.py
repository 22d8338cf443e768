"""Typed experiment config, validated before any work: plain data, no torch.

- ``data.py`` / ``client.py`` / ``tracking.py``: the data (and its partition), client and
  tracking sections; ``sections.py``: the model, runtime and algorithm sections;
- ``deployment.py`` / ``asynchronous.py``: the deployment options and asynchronous rounds;
- ``evaluation.py``: the ``eval`` section (held-out clients, which model, when);
- ``system.py``: the ``system`` section (devices, networks, availability, deadlines);
- ``experiment.py``: ``ExperimentConfig``, the run's own keys and one of each section;
- ``build.py``: a nested dict (YAML + overrides, ``yaml_io.py``) into an ExperimentConfig.

Every error is a ``ConfigError`` naming the dotted key, the value and what is allowed; each
field's range is declared on it with ``checked`` (fedsim/checks.py), as ``fedsim keys`` shows.
"""

from fedsim.config.asynchronous import AsyncConfig
from fedsim.config.build import build_dataclass, config_from_dict, load_config
from fedsim.config.client import ClientConfig
from fedsim.config.data import DataConfig, PartitionConfig
from fedsim.config.deployment import (
    AggregationConfig,
    AttackConfig,
    CompressionConfig,
    PrivacyConfig,
)
from fedsim.config.evaluation import EvalConfig
from fedsim.config.experiment import ExperimentConfig
from fedsim.config.sections import AlgorithmConfig, ModelConfig, RuntimeConfig, is_run_name
from fedsim.config.system import SpeedSpec, SystemConfig, parse_speeds
from fedsim.config.tracking import TrackingConfig, WandbConfig
from fedsim.config.yaml_io import apply_overrides, check_given_once, read_yaml_mapping

__all__ = [
    "AggregationConfig",
    "AlgorithmConfig",
    "AsyncConfig",
    "AttackConfig",
    "ClientConfig",
    "CompressionConfig",
    "DataConfig",
    "EvalConfig",
    "ExperimentConfig",
    "ModelConfig",
    "PartitionConfig",
    "PrivacyConfig",
    "RuntimeConfig",
    "SpeedSpec",
    "SystemConfig",
    "TrackingConfig",
    "WandbConfig",
    "apply_overrides",
    "build_dataclass",
    "check_given_once",
    "config_from_dict",
    "is_run_name",
    "load_config",
    "parse_speeds",
    "read_yaml_mapping",
]
