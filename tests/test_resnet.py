"""ResNet-18 for 32x32 inputs as an FLModule with named blocks, on small tensors."""

from __future__ import annotations

import numpy as np
import torch
from torchvision.models import resnet18

from fedsim.algorithms.base import ClientInfo, FederationInfo
from fedsim.algorithms.fedper import FedPer, FedPerParams
from lightning_modules.flat_params import ParamLayout, bind_flat_parameters, flatten_module
from lightning_modules.registry import build_model


def make(in_channels: int = 3, image_size: int = 32):
    torch.manual_seed(0)
    return build_model(
        "resnet18", in_channels=in_channels, num_classes=10, image_size=image_size, lr=0.05
    )


def test_shapes_and_the_cifar_stem():
    model = make()
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    conv = model.stem[0]
    assert conv.kernel_size == (3, 3) and conv.stride == (1, 1)
    assert not any(isinstance(m, torch.nn.MaxPool2d) for m in model.modules())
    gray = make(in_channels=1, image_size=28)
    assert gray(torch.randn(2, 1, 28, 28)).shape == (2, 10)


def test_same_parameters_as_torchvision_resnet18_but_the_stem_conv():
    ours = sum(p.numel() for p in make().parameters())
    reference = sum(p.numel() for p in resnet18(num_classes=10).parameters())
    assert ours == reference - 64 * 3 * 7 * 7 + 64 * 3 * 3 * 3


def test_named_blocks_cover_every_parameter_and_buffer_once():
    model = make()
    assert model.block_names[0] == "stem" and model.block_names[-1] == "fc"
    assert len(model.block_names) == 10  # stem, 8 basic blocks, fc
    owned = [n for b in model.block_names for n in model.block_parameters(b)]
    layout = ParamLayout.from_module(model)
    assert sorted(owned) == sorted(e.name for e in layout.entries)
    assert model.head_parameters(1) == ["fc.weight", "fc.bias"]
    assert "layer4_1.bn2.running_var" in model.head_parameters(2)


def test_flat_binding_and_a_training_step_on_small_tensors():
    model = make()
    flat, layout = bind_flat_parameters(model)
    assert flat.numel() == layout.total
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    before = flat.clone()
    optimizer = model.configure_optimizers()
    loss = model.training_step((x, y))
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss) and not torch.equal(flat, before)  # steps write the buffer
    running = layout.view(flat, "stem.1.running_mean")
    assert running.abs().sum() > 0  # BatchNorm statistics live in the flat vector too


def test_fedper_splits_resnet_by_basic_blocks():
    model = make()
    layout = ParamLayout.from_module(model)
    federation = FederationInfo(
        layout=layout,
        num_clients=2,
        num_classes=10,
        train_sizes=np.array([5, 5]),
        class_counts=np.ones((2, 10), dtype=np.int64),
        head_names=model.head_parameters(1),
        block_names=list(model.block_names),
        block_parameters={b: model.block_parameters(b) for b in model.block_names},
    )
    algo = FedPer(FedPerParams(personal_layers=3), federation)
    personal = {n for b in ("layer4_0", "layer4_1", "fc") for n in model.block_parameters(b)}
    assert set(algo.base_names[3]) == {e.name for e in layout.entries} - personal
    params = flatten_module(model)
    info = ClientInfo(client=0, num_train=5, class_counts=np.ones(10), round=0)
    plan = algo.client_start({"params": params}, {}, None, info)
    update = algo.client_finish(plan, params, None, info)
    ((_, base),) = update.sums.values()
    size = sum(layout.by_name[n].numel for n in personal)
    assert base.numel() == layout.total - size and update.state["personal"].numel() == size
