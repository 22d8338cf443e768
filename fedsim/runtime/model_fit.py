"""One forward of a sample batch when a model is built: does the model fit the data?

Run on the driver when the run is built (``--check`` too, before any folder is written) and
in every worker before it binds the module's parameters. The same forward materializes lazy
modules (``nn.LazyLinear``...), as Lightning users expect from a first batch. A model that
does not fit is one line naming the model, the input shape and the layer that failed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from fedsim.data.federated import FederatedData
from fedsim.errors import ConfigError
from fedsim.run_plan import ModelBuild
from fedsim.runtime.lightning_steps import resolve_optimizers
from fedsim.runtime.training import prepare_batch
from lightning_modules.registry import build_model, owns_optimizers

SAMPLE_SIZE = 2


def build_client_model(build: ModelBuild, weights: bool = True) -> nn.Module:
    """The model clients train, on the driver (its template) and in every worker alike:
    ``build.kwargs`` hold the data's shapes, the algorithm's adapter variant and the
    optimizer's constructor part, and the rest of ``client.optimizer``'s settings is set on a
    built-in module here (one route). ``weights=False`` (the driver's template, which runs
    no model): a pretrained base's structure only, for a model that takes ``weights``."""
    module = build_model(build.name, build.args, **build.kwargs,
                         **({} if weights else {"weights": False}))  # fmt: skip
    build.apply(module)
    return module


def starting_lr(client_lr: float | None, module: Any) -> float:
    """The lr clients start each round from: ``client.lr`` for a module that takes it, else
    the module's own optimizer's (also the step size of an algorithm that steps SGD itself,
    SP-CACW). Run after ``check_model``, which refuses a module without a usable one."""
    if not owns_optimizers(type(module)):
        return float(client_lr)  # type: ignore[arg-type]
    optimizer, _ = resolve_optimizers(module)
    group = optimizer.param_groups[0]
    return float(group.get("initial_lr", group["lr"]))


def sample_batch(
    data: FederatedData, device: torch.device | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A small batch of the first clients' training samples, as training would see it."""
    first = next((c.train for c in data.clients if len(c.train)), np.arange(1))
    indices = np.asarray(first[:SAMPLE_SIZE], dtype=np.int64)
    return prepare_batch(data.batch(indices), device)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def traced_forward(
    module: nn.Module, x: torch.Tensor
) -> tuple[Any, str | None, BaseException | None]:
    """``module(x)`` with the innermost layer that was running when it raised, if it did:
    (output, None, None) or (None, layer name or None for the module's own code, error)."""
    running: list[str] = []

    def enter(name: str) -> Any:
        return lambda *_: running.append(name)  # returns None: the input is unchanged

    def leave(*_: Any) -> None:
        running.pop()  # a forward hook must return None, or it replaces the output

    handles = []
    for name, layer in module.named_modules():
        if layer is not module:
            handles.append(layer.register_forward_pre_hook(enter(name)))
            handles.append(layer.register_forward_hook(leave))
    try:
        return module(x), None, None
    except Exception as err:  # noqa: BLE001 - reported as one line by fit_model
        return None, (running[-1] if running else None), err
    finally:
        for handle in handles:
            handle.remove()


def fit_model(module: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], num_classes: int,
              model_name: str) -> None:  # fmt: skip
    """Run ``module`` on ``batch`` (eval mode, no gradient: no BatchNorm statistic moves);
    ConfigError unless it gives logits of shape (batch, ``num_classes``), or, for targets
    of shape (batch, positions...) (a language model's next token at every position), of
    shape (batch, vocabulary, positions...)."""
    x, y = batch
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            out, layer, err = traced_forward(module, x)
    finally:
        module.train(was_training)
    name = type(module).__name__
    shape = tuple(x.shape)
    if err is not None:
        where = (
            "in its own forward code"
            if layer is None
            else (f"in layer {layer} ({type(module.get_submodule(layer)).__name__})")
        )
        raise ConfigError(
            "model.name", model_name, f"{name} does not fit the data: a batch of shape {shape} "
            f"fails {where}: {_first_line(err)}",
        ) from None  # fmt: skip
    expected: tuple[Any, ...] = (shape[0], num_classes)
    if y.dim() > 1:  # per position: the model checks its vocabulary against the data's
        vocab = out.shape[1] if isinstance(out, torch.Tensor) and out.dim() > 1 else "vocab"
        expected = (shape[0], vocab, *y.shape[1:])
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != expected:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError(
            "model.name", model_name, f"{name}(x) on a batch of shape {shape} gives {got}; fedsim "
            f"reads logits of shape {expected} (batch, classes) from forward(x)",
        )  # fmt: skip


def check_features(module: nn.Module, batch: tuple[torch.Tensor, torch.Tensor],
                   output_layer: nn.Module | None, model_name: str) -> None:  # fmt: skip
    """ConfigError unless ``output_layer(module.features(x))`` equals ``module(x)``: the
    representation MOON and FedRoD read must be the output layer's input."""
    x, _ = batch
    name = type(module).__name__
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            logits = module(x)
            try:
                rebuilt = None if output_layer is None else output_layer(module.features(x))
            except Exception as err:  # noqa: BLE001 - one line below
                rebuilt, detail = None, _first_line(err)
            else:
                detail = "they differ"
    finally:
        module.train(was_training)
    if rebuilt is None or rebuilt.shape != logits.shape or not torch.allclose(
        rebuilt, logits, rtol=1e-4, atol=1e-5
    ):  # fmt: skip
        raise ConfigError(
            "model.name", model_name, f"{name}.features(x) must be what its output layer reads, "
            f"so that the output layer applied to it gives forward(x) ({detail})",
        )  # fmt: skip
