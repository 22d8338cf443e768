"""The one builder of a LoRA adapter (peft) over a pretrained base, and what the adapted model
declares about its adapter: both ``causal_lm`` and ``sequence_classifier`` are built here.

An algorithm asks for an adapter *variant* (``fedsim/algorithm_params``: its ``ADAPTER``), as
peft's ``LoraVariant`` adds DoRA to a layer without a flag on the model:

- ``lora``: the plain adapter (A, B per adapted linear module);
- ``residual``: a dense residual per adapted module beside A and B, FedEx-LoRA's fold
  (``lora_residual.py``);
- ``personal``: a second adapter beside the first, mixed per instance, FedDPA's
  (``dual_adapter.py``);
- ``scaled``: one factor on every adapter product, with which HetLoRA runs a rank-r client at
  alpha / r (``lora_scale.py``).

fedsim passes the variant to the model (``adapter_variant``); ``build_adapter`` applies it to
any base. The model then *declares* its adapter (``adapter_parts``): per adapted module the
flat-vector names of A, B, and the residual or the personal A and B where the variant has
them, read from peft's layer objects (never parsed from parameter names), so an algorithm
reads which entries are which from ``FederationInfo.adapters``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fedsim.errors import ConfigError
from lightning_modules.dual_adapter import GLOBAL, PERSONAL, add_personal_adapter
from lightning_modules.lora_args import check_lora_key
from lightning_modules.lora_residual import RESIDUAL, add_residuals
from lightning_modules.lora_scale import add_rank_scale

SOURCE_KEY = "model.args.source"
VARIANTS = ("lora", "residual", "personal", "scaled")
# the modules a variant adds beside the peft model, by the attribute the model holds them as
# (their entries' names: dual.mix, dual.reference, rank_scale.factor)
DUAL, RANK_SCALE = "dual", "rank_scale"
_LAYER = re.compile(r"^(.*?\.layers\.\d+)\.")


@dataclass(frozen=True)
class LoraSpec:
    """A checked adapter configuration: rank, alpha, dropout, the targeted module names and
    the transformer layers adapted (None: every layer; peft's ``layers_to_transform``)."""

    rank: int
    alpha: float  # as given (peft scales by alpha / rank)
    dropout: float
    targets: list[str]
    layers: list[int] | None = None


@dataclass(frozen=True)
class LoraModule:
    """One adapted linear module: its name and the flat-vector entries of its matrices."""

    module: str
    a: str  # A: (rank, in_features)
    b: str  # B: (out_features, rank)
    residual: str | None = None  # (out_features, in_features): the residual variant
    personal_a: str | None = None  # the personal variant's second adapter
    personal_b: str | None = None


@dataclass(frozen=True)
class AdapterParts:
    """What an adapted model declares: its variant, its adapted modules in order, the personal
    variant's mixing entries (``dual_adapter.py``: ``mix`` (g, p, w, f), ``reference``) and
    the scaled variant's factor (``lora_scale.py``)."""

    variant: str
    modules: tuple[LoraModule, ...]
    mix: str | None = None
    reference: str | None = None
    scale: str | None = None


def check_lora(
    rank: Any, alpha: Any, dropout: Any, targets: Any, dtype: str, layers: Any = None
) -> LoraSpec:
    """``model.args``' adapter keys checked (a ConfigError naming the key otherwise), by the
    rules the config check applies too (``lora_args``)."""
    given = {"rank": rank, "alpha": alpha, "dropout": dropout, "targets": targets,
             "layers": layers, "dtype": dtype}  # fmt: skip
    for name, value in given.items():
        check_lora_key(name, value)
    if isinstance(targets, str):
        targets = [targets]
    return LoraSpec(rank, alpha, dropout, list(targets), None if layers is None else list(layers))


def check_layers(model: nn.Module, layers: list[int] | None, source: str) -> None:
    """ConfigError when ``layers`` names a transformer layer ``model`` does not have."""
    depth = getattr(model.config, "num_hidden_layers", None)
    if layers and depth is not None and max(layers) >= depth:
        raise ConfigError("model.args.layers", layers, f"{source} has {depth} layers: "
                          f"indices 0 to {depth - 1}")  # fmt: skip


def check_variant(variant: Any) -> str:
    """The adapter variant fedsim passes (None: plain ``lora``)."""
    if variant is None:
        return "lora"
    if variant not in VARIANTS:
        raise ConfigError("adapter variant", variant, f"allowed: {', '.join(VARIANTS)}")
    return str(variant)


def check_targets(model: nn.Module, targets: list[str], source: str) -> None:
    """ConfigError naming the targets ``model`` has no Linear module of that name for."""
    linear = {n.rsplit(".", 1)[-1] for n, m in model.named_modules()
              if isinstance(m, nn.Linear)}  # fmt: skip
    missing = [t for t in targets if t not in linear]
    if missing:
        raise ConfigError(
            "model.args.targets", targets, f"{source} has no linear module named "
            f"{', '.join(missing)}; it has: {', '.join(sorted(linear))}",
        )  # fmt: skip


def check_length(base: nn.Module, seq_len: int, source: str) -> None:
    """ConfigError when samples of ``seq_len`` tokens are longer than ``base`` reads."""
    limit = getattr(base.config, "max_position_embeddings", None)
    if seq_len and limit and seq_len > limit:
        raise ConfigError("data.max_length", seq_len, f"{source} reads at most {limit} tokens")


def checkpoint_activations(model: Any) -> None:
    """Recompute ``model``'s activations in backward (transformers 5 renames gradient
    checkpointing activation checkpointing; either name is taken)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is None:
        enable = model.gradient_checkpointing_enable
    enable({"use_reentrant": False})
    model.enable_input_require_grads()


LAYER_PATTERNS = ("layers", "h", "block", "blocks", "layer")  # peft's common layer names


def build_adapter(
    model: nn.Module, lora: LoraSpec, variant: str, hidden_size: int, checkpointing: bool = False
) -> tuple[nn.Module, dict[str, nn.Module]]:
    """peft's LoRA (``lora``) on ``model`` (an ``adapter_ready`` copy of a frozen base) with
    ``variant`` applied: (the peft model, the modules the variant adds by the attribute the
    model holds them as: ``dual`` (personal), ``rank_scale`` (scaled)).
    The adapters are drawn in this order from the random stream: the first, then (personal)
    the second, so a variant leaves the first adapter's initial bits as they are."""
    import peft

    # named layers: peft finds a module's layer index without a pattern only below a prefix
    # ("model.layers.3."), not in a bare decoder's "layers.3." (sequence_classifier's)
    pattern = list(LAYER_PATTERNS) if lora.layers is not None else None
    config = peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                             target_modules=lora.targets, layers_to_transform=lora.layers,
                             layers_pattern=pattern, bias="none")  # fmt: skip
    adapted = peft.get_peft_model(model, config)
    extras: dict[str, nn.Module] = {}
    if variant == "residual":  # FedEx-LoRA's fold, beside the shared frozen weights
        add_residuals(adapted)
    elif variant == "personal":  # a second adapter beside the first
        extras[DUAL] = add_personal_adapter(adapted, config, hidden_size)
    elif variant == "scaled":  # one factor on every product
        extras[RANK_SCALE] = add_rank_scale(adapted)
    if checkpointing:
        checkpoint_activations(adapted)
    return adapted, extras


def adapter_blocks(named: Iterable[tuple[str, nn.Parameter]], prefix: str = "") -> list[str]:
    """The transformer layers (or other adapted modules) holding trainable parameters among
    ``named``, bottom to top: FedPer's personal layers are the top ones."""
    found: dict[str, None] = {}
    for name, p in named:
        if p.requires_grad:
            layer = _LAYER.match(name)
            found[prefix + (layer.group(1) if layer else name.split(".lora_")[0])] = None
    return list(found)


def adapter_parts(model: nn.Module, variant: str, extras: dict[str, nn.Module]) -> AdapterParts:
    """What ``model`` (an ``FLModule`` holding a peft adapter) declares: each LoRA layer's
    matrices by their names in ``model``, found by identity from peft's layer objects."""
    names = {id(p): n for n, p in model.named_parameters()}

    def name_of(tensor: Any) -> str | None:
        return None if tensor is None else names[id(tensor)]

    modules = []
    for module_name, layer in model.named_modules():
        lora_a, lora_b = getattr(layer, "lora_A", None), getattr(layer, "lora_B", None)
        if not (isinstance(lora_a, nn.ModuleDict) and GLOBAL in lora_a):
            continue
        second = PERSONAL in lora_a
        modules.append(LoraModule(
            module_name, names[id(lora_a[GLOBAL].weight)], names[id(lora_b[GLOBAL].weight)],
            name_of(getattr(layer, RESIDUAL, None)),
            name_of(lora_a[PERSONAL].weight) if second else None,
            name_of(lora_b[PERSONAL].weight) if second else None,
        ))  # fmt: skip
    mix = reference = scale = None
    if DUAL in extras:
        mix, reference = name_of(extras[DUAL].mix), name_of(extras[DUAL].reference)
    if RANK_SCALE in extras:
        scale = name_of(extras[RANK_SCALE].factor)
    return AdapterParts(variant, tuple(modules), mix, reference, scale)


def variant_forward(dual: nn.Module | None, x: torch.Tensor) -> Any:
    """The context a forward over ``x`` runs in: the personal variant's per-instance scales
    (``DualAdapter.mixing``), or nothing."""
    import contextlib

    return contextlib.nullcontext() if dual is None else dual.mixing(x)
