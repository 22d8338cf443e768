"""Real datasets, client partitions and per-client train/test splits -> FederatedData."""

from fedsim.data.datasets import DATASET_NAMES, ImageDataset, load_dataset, read_idx
from fedsim.data.federated import ClientSplit, FederatedData, build_federated_data
from fedsim.data.partition import (
    PARTITION_NAMES,
    partition_dirichlet,
    partition_iid,
    partition_labels,
    partition_pathological,
)

__all__ = [
    "DATASET_NAMES",
    "PARTITION_NAMES",
    "ClientSplit",
    "FederatedData",
    "ImageDataset",
    "build_federated_data",
    "load_dataset",
    "partition_dirichlet",
    "partition_iid",
    "partition_labels",
    "partition_pathological",
    "read_idx",
]
