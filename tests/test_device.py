"""``runtime.device``: where the local executor's worker runs (Ray workers: by GPU share)."""

from unittest import mock

import pytest
import torch

from fedsim.errors import ConfigError
from fedsim.runtime.factory import local_device


def _gpus(count: int):
    return mock.patch.multiple(
        torch.cuda,
        is_available=mock.Mock(return_value=count > 0),
        device_count=mock.Mock(return_value=count),
    )


def test_auto_is_cuda_only_where_a_gpu_is_visible():
    with _gpus(0):
        assert local_device("auto") == "cpu"
    with _gpus(2):
        assert local_device("auto") == "cuda"
        assert local_device("cuda:1") == "cuda:1"
        assert local_device("cpu") == "cpu"


def test_missing_cuda_device_names_what_is_there():
    with _gpus(2), pytest.raises(ConfigError) as error:
        local_device("cuda:2")
    assert str(error.value) == (
        "runtime.device='cuda:2': this process sees 2 CUDA devices; "
        "allowed here: auto, cpu, cuda, cuda:0..cuda:1"
    )
    with (
        _gpus(0),
        pytest.raises(ConfigError, match="sees 0 CUDA devices; allowed here: auto, cpu$"),
    ):
        local_device("cuda")
