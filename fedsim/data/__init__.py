"""Real datasets, client partitions and per-client train/test splits -> FederatedData.

The names below load on first use (PEP 562): ``fedsim.data.names`` (what the config check
reads) must not import torch.
"""

from __future__ import annotations

from fedsim.plugins import lazy_exports

_EXPORTS = {
    "DATASET_NAMES": "fedsim.data.names",
    "ImageDataset": "fedsim.data.dataset_types",
    "load_dataset": "fedsim.data.datasets",
    "read_idx": "fedsim.data.datasets",
    "ClientSplit": "fedsim.data.federated",
    "FederatedData": "fedsim.data.federated",
    "build_federated_data": "fedsim.data.build",
    "PARTITION_NAMES": "fedsim.data.partition",
    "partition_dirichlet": "fedsim.data.partition",
    "partition_iid": "fedsim.data.partition",
    "partition_labels": "fedsim.data.partition",
    "partition_pathological": "fedsim.data.partition",
}

__all__ = list(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
