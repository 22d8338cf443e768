"""Storage below both the algorithms and the runtime: per-client state, spillable to disk.

It imports neither: the driver keeps clients' private state here, and an algorithm that
keeps many models on the server (FedFomo) asks for a store of its own.
"""

from fedsim.storage.client_states import ClientStateStore, CorruptedState, default_memory_budget

__all__ = ["ClientStateStore", "CorruptedState", "default_memory_budget"]
