"""Flat parameter buffers: one copy_ loads a model, training writes through the views."""

import torch

from lightning_modules.cnn import FedAvgCNN
from lightning_modules.flat_params import (
    ParamEntry,
    ParamLayout,
    bind_flat_parameters,
    flat_ranges,
    flatten_module,
    gather,
    scatter,
)


def test_pfllib_shapes_gray_and_colour():
    gray = FedAvgCNN(in_channels=1, num_classes=10, image_size=28)
    colour = FedAvgCNN(in_channels=3, num_classes=100, image_size=32)
    assert gray.fc1[0].in_features == 1024 and colour.fc1[0].in_features == 1600
    assert gray(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert colour(torch.zeros(2, 3, 32, 32)).shape == (2, 100)


def test_blocks_split_body_and_head():
    model = FedAvgCNN()
    assert model.head_parameters(1) == ["fc.weight", "fc.bias"]
    assert model.body_parameters(1)[0] == "conv1.0.weight"
    assert set(model.head_parameters(2)) == {"fc1.0.weight", "fc1.0.bias", "fc.weight", "fc.bias"}
    every = {n for n, _ in model.named_parameters()}
    assert set(model.body_parameters(1)) | set(model.head_parameters(1)) == every


def test_bound_views_share_one_buffer():
    torch.manual_seed(0)
    model = FedAvgCNN()
    before = flatten_module(model)
    flat, layout = bind_flat_parameters(model)
    assert torch.equal(flat, before) and layout.total == flat.numel()
    flat.copy_(torch.arange(flat.numel(), dtype=torch.float32))
    assert torch.equal(model.fc.bias, layout.view(flat, "fc.bias"))
    optimizer = model.configure_optimizers()
    loss = model.training_step((torch.randn(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])))
    loss.backward()
    snapshot = flat.clone()
    optimizer.step()
    assert not torch.equal(flat, snapshot)  # the step wrote through the views
    assert torch.equal(flatten_module(model), flat)


def test_ranges_gather_and_scatter_part_of_a_vector():
    """Adjacent entries merge into one range; gather copies, scatter writes back in place."""
    layout = ParamLayout([ParamEntry("a", (2,), 0, 2), ParamEntry("b", (3,), 2, 3),
                          ParamEntry("c", (1,), 5, 1)])  # fmt: skip
    assert flat_ranges(layout, ["c", "a"]) == [(0, 2), (5, 6)]
    assert flat_ranges(layout, ["b", "a"]) == [(0, 5)]
    flat = torch.arange(6.0)
    part = gather(flat, [(0, 2), (5, 6)])
    assert part.tolist() == [0.0, 1.0, 5.0]
    part += 10
    assert flat.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # a copy, not a view
    scatter(flat, [(0, 2), (5, 6)], part)
    assert flat.tolist() == [10.0, 11.0, 2.0, 3.0, 4.0, 15.0]
    assert gather(flat, []).numel() == 0 and gather(flat, None).tolist() == flat.tolist()
    scatter(flat, None, torch.zeros(6))
    assert flat.tolist() == [0.0] * 6
