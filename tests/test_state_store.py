"""Client state store: the mapping API, the memory budget, spilling, pickling and cleanup."""

from __future__ import annotations

import gc
import pickle

import numpy as np
import pytest
import torch
from helpers import assert_same

from fedsim.config import load_config
from fedsim.runtime.executor import LocalExecutor
from fedsim.simulation import Simulation
from fedsim.storage import ClientStateStore, default_memory_budget


def state(value: float, n: int = 250) -> dict:
    """A state of n float32 (4n bytes) plus non-tensor values."""
    return {
        "params": torch.full((n,), float(value)),
        "control": np.arange(3, dtype=np.int64) + int(value),
        "round": int(value),
        "nested": {"velocity": torch.full((2, 2), -float(value), dtype=torch.float64)},
    }


def test_mapping_api_in_memory():
    store = ClientStateStore()
    assert store.get(3) is None and 3 not in store and len(store) == 0
    first = state(1)
    store.put(3, first)
    assert store.get(3) is first and 3 in store and len(store) == 1
    store.put(3, state(2))
    assert store.get(3)["round"] == 2 and len(store) == 1
    assert store.num_spilled == 0 and store.spill_dir is None
    assert store.memory_bytes == 250 * 4 + 3 * 8 + 4 * 8
    assert store.memory_budget_bytes == default_memory_budget() > 0


def test_spills_oldest_beyond_budget_and_reads_back():
    per_state = 250 * 4 + 3 * 8 + 4 * 8
    store = ClientStateStore(memory_budget_bytes=2 * per_state)
    for client in range(5):
        store.put(client, state(client))
    assert len(store) == 5 and store.num_spilled == 3
    assert store.memory_bytes <= store.memory_budget_bytes
    assert sorted(p.name for p in store.spill_dir.iterdir()) == [
        f"client_{c}.pkl" for c in range(3)
    ]
    for client in range(5):
        assert client in store
        assert_same(store.get(client), state(client))
    loaded = store.get(0)
    loaded["params"].add_(1.0)  # read back from disk: owned and writable
    assert store.clients() == [0, 1, 2, 3, 4]


def test_put_over_a_spilled_client_replaces_its_file():
    store = ClientStateStore(memory_budget_bytes=0)
    store.put(7, state(1))
    path = store.spill_dir / "client_7.pkl"
    assert path.exists() and store.memory_bytes == 0
    store.put(7, state(5))
    assert store.get(7)["round"] == 5 and len(store) == 1 and store.num_spilled == 1


def test_recently_read_states_stay_in_memory():
    per_state = 250 * 4 + 3 * 8 + 4 * 8
    store = ClientStateStore(memory_budget_bytes=2 * per_state)
    store.put(0, state(0))
    store.put(1, state(1))
    store.get(0)  # 1 is now the least recently used
    store.put(2, state(2))
    assert sorted(p.name for p in store.spill_dir.iterdir()) == ["client_1.pkl"]


def test_close_and_garbage_collection_remove_the_spill_folder():
    store = ClientStateStore(memory_budget_bytes=0)
    store.put(0, state(0))
    folder = store.spill_dir
    assert folder.is_dir()
    store.close()
    assert not folder.exists() and len(store) == 0
    store.close()  # twice is fine

    other = ClientStateStore(memory_budget_bytes=0)
    other.put(0, state(0))
    folder = other.spill_dir
    del other
    gc.collect()
    assert not folder.exists()


def test_a_spilled_store_pickles_by_contents():
    """A checkpoint holds states, not spill paths: it loads after the spill folder is gone."""
    per_state = 250 * 4 + 3 * 8 + 4 * 8
    store = ClientStateStore(memory_budget_bytes=per_state)
    for client in range(4):
        store.put(client, state(client))
    assert store.num_spilled == 3
    saved = pickle.dumps(store)
    folder = store.spill_dir
    store.close()
    assert not folder.exists()
    loaded = pickle.loads(saved)
    assert loaded.clients() == [0, 1, 2, 3] and loaded.memory_budget_bytes == per_state
    assert loaded.num_spilled == 3 and loaded.spill_dir != folder  # a working store of its own
    for client in range(4):
        assert_same(loaded.get(client), state(client))
    loaded.put(9, state(9))
    assert loaded.num_spilled == 4 and len(loaded) == 5
    loaded.close()


def test_pickling_leaves_the_store_as_it_was():
    store = ClientStateStore(memory_budget_bytes=0)
    store.put(0, state(0))
    path = store.spill_dir / "client_0.pkl"
    copy = pickle.loads(pickle.dumps(store))
    assert path.exists() and store.num_spilled == 1  # the original keeps its file
    assert_same(store.get(0), copy.get(0))
    store.close()
    assert_same(copy.get(0), state(0))  # and the copy does not depend on it
    copy.close()


def test_negative_budget_is_rejected():
    with pytest.raises(ValueError, match="memory_budget_bytes"):
        ClientStateStore(memory_budget_bytes=-1)


@pytest.mark.slow
def test_simulation_with_everything_spilled_matches_in_memory():
    """Local-only keeps a full model per client: spilling it all must change nothing."""
    overrides = [
        "data.name=mnist-5k",
        "data.max_samples=1200",
        "data.num_clients=6",
        "rounds=2",
        "join_ratio=0.5",
        "client.lr=0.05",
        "algorithm.name=local",
    ]
    results = []
    for budget in ("null", "0"):
        cfg = load_config(None, [*overrides, f"runtime.state_memory_gb={budget}"])
        sim = Simulation(cfg)
        spec = sim.worker_spec
        spec.num_threads = 1
        results.append(sim.run(LocalExecutor(spec, sim.data)))
    in_memory, spilled = results
    assert spilled.client_store.num_spilled == len(spilled.client_store) > 0
    assert in_memory.client_store.num_spilled == 0
    assert in_memory.summary == spilled.summary
    assert in_memory.client_store.clients() == spilled.client_store.clients()
    for client in in_memory.client_store.clients():
        assert torch.equal(
            in_memory.client_store.get(client)["params"], spilled.client_store.get(client)["params"]
        )
    spilled.client_store.close()
