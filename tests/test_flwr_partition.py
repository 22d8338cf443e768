"""data.partition.name=flwr:<Partitioner>: flwr-datasets' own partition, reproduced exactly,
on an hf: dataset in FEMNIST's schema and on a built-in; bad arguments in one line."""

from __future__ import annotations

import numpy as np
import pytest

flwr_partitioner = pytest.importorskip("flwr_datasets.partitioner")

from hf_fixtures import femnist_dataset, save_femnist  # noqa: E402

from fedsim.config import load_config  # noqa: E402
from fedsim.errors import ConfigError  # noqa: E402
from fedsim.simulation import build_data  # noqa: E402


@pytest.fixture(scope="module")
def femnist(tmp_path_factory):
    return save_femnist(tmp_path_factory.mktemp("hf"))


def _data(*overrides: str):
    cfg = load_config("configs/quickstart.yaml", ["runtime.executor=local", *overrides])
    return build_data(cfg)


@pytest.mark.parametrize("seed", [7, 42])
def test_dirichlet_partitioner_gives_flwr_datasets_own_partition(femnist, seed):
    args = f"{{alpha: 0.5, seed: {seed}, min_partition_size: 5}}"
    data = _data(f"data.name=hf:{femnist[0]}", "data.label_column=character",
                 "data.num_clients=4", "data.partition.name=flwr:DirichletPartitioner",
                 f"data.partition.args={args}")  # fmt: skip
    table = femnist_dataset().add_column("row", list(range(240)))
    own = flwr_partitioner.DirichletPartitioner(
        num_partitions=4, partition_by="character", alpha=0.5, seed=seed, min_partition_size=5
    )
    own.dataset = table
    for client, split in enumerate(data.clients):
        expected = np.sort(np.asarray(own.load_partition(client)["row"]))
        np.testing.assert_array_equal(np.sort(split.all), expected)
    assert data.partition["args"]["seed"] == seed and data.partition["args"]["alpha"] == 0.5


def test_a_flwr_partitioner_takes_the_runs_seed_unless_args_set_one():
    data = _data("data.max_samples=400", "data.num_clients=5", "seed=3",
                 "data.partition.name=flwr:IidPartitioner")  # fmt: skip
    assert data.num_clients == 5 and sum(len(c.all) for c in data.clients) == 400
    assert data.partition["args"] == {"num_partitions": 5}  # IidPartitioner takes no seed
    data = _data(
        "data.max_samples=400",
        "data.num_clients=5",
        "seed=3",
        "data.partition.name=flwr:DirichletPartitioner",
        "data.partition.args={alpha: 1}",
    )
    assert data.partition["args"]["seed"] == 3


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["data.partition.name=flwr:NoSuchPartitioner"], "allowed: flwr:"),
        (["data.partition.name=flwr:DirichletPartitioner", "data.partition.args={beta: 1}"],
         "data.partition.args.beta=1: allowed: partition_by, alpha"),
        (["data.partition.name=flwr:DirichletPartitioner",
          "data.partition.args={alpha: 1, num_partitions: 3}"], "is data.num_clients"),
    ],
)  # fmt: skip
def test_bad_flwr_partitions_are_one_config_error(overrides, needle):
    with pytest.raises(ConfigError, match=needle) as error:
        _data("data.max_samples=400", "data.num_clients=5", *overrides)
    assert "\n" not in str(error.value)
