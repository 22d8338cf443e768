"""Models by config name: a built-in name, or ``module:Class`` for a user's LightningModule
(an ``FLModule``, or a plain ``pytorch_lightning.LightningModule``: see ``blocks.py``).

The built-ins are import paths too, so a user's model resolves exactly as they do. Importing
this module does not import Lightning (seconds): a config naming a built-in model is
checked without it, and Lightning comes in when a model is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning_modules.base import FLModule

MODELS: dict[str, str] = {
    "fedavg_cnn": "lightning_modules.cnn:FedAvgCNN",
    "fedavg_cnn_bn": "lightning_modules.cnn:FedAvgCNNBN",
    "resnet18": "lightning_modules.resnet:ResNet18",
    "femnist_cnn": "lightning_modules.leaf_cnn:FemnistCNN",
    "celeba_cnn": "lightning_modules.leaf_cnn:CelebaCNN",
    "char_lstm": "lightning_modules.char_lstm:CharLSTM",
    "mlp": "lightning_modules.mlp:MLP",
    "causal_lm": "lightning_modules.causal_lm:CausalLM",
    "sequence_classifier": "lightning_modules.sequence_classifier:SequenceClassifier",
}
MODEL_NAMES = tuple(MODELS)
SUMMARIES = {
    "fedavg_cnn": "PFLlib's FedAvgCNN: 2 conv + 2 FC layers (images)",
    "fedavg_cnn_bn": "FedAvgCNN with BatchNorm after each convolution (FedBN's model)",
    "resnet18": "ResNet-18 with a 3x3 stem for 32x32 images",
    "femnist_cnn": "LEAF's FEMNIST CNN: 2 'same' conv + FC 2048 (6.6M parameters on 28x28)",
    "celeba_cnn": "LEAF's CelebA CNN: 4 x (conv, BatchNorm, pool) + one FC (84x84 colour)",
    "char_lstm": "LEAF's next-character LSTM (Shakespeare)",
    "mlp": "fully connected ReLU layers, model.hidden sizes (default 784-200-200-10 on digits)",
    "causal_lm": "a pretrained causal LM (model.args.source; SmolLM2-135M) with a LoRA adapter",
    "sequence_classifier": "a pretrained LM's body with a LoRA adapter and a classification head",
}
ALLOWED = (
    f"allowed: {', '.join(MODEL_NAMES)}, or module:Class naming a LightningModule "
    "(lightning_modules.base.FLModule, or a plain pytorch_lightning.LightningModule)"
)


def is_builtin(name: str) -> bool:
    """Whether ``model.name`` is one of the built-in models (no import needed to know)."""
    return name in MODELS


def model_class(name: str) -> type[FLModule]:
    """The LightningModule class for ``model.name`` (raises ConfigError naming the key)."""
    import pytorch_lightning as pl

    from fedsim.errors import ConfigError
    from fedsim.plugins import import_subclass, is_import_path

    if name not in MODELS and not is_import_path(name):
        raise ConfigError("model.name", name, ALLOWED)
    return import_subclass("model.name", MODELS.get(name, name), pl.LightningModule, ALLOWED)


# the data's shapes, which fedsim passes to a constructor that names them (model.args may not)
FROM_DATA = ("in_channels", "num_classes", "image_size", "vocab_size", "seq_len")
# what fedsim sets itself, never model.args: the adapter variant the algorithm declares
# (lightning_modules/adapters.py), and weights=False for the driver's template (a model that
# does not take ``weights`` is built whole)
FROM_FEDSIM = ("adapter_variant", "weights")


def owns_optimizers(cls: type) -> bool:
    """Whether ``cls`` defines its own ``configure_optimizers`` (not ``FLModule``'s, which
    builds ``client.optimizer`` at ``client.lr``)."""
    from lightning_modules.base import FLModule

    return cls.configure_optimizers is not FLModule.configure_optimizers


def build_model(name: str, args: dict[str, Any] | None = None, **kwargs: Any) -> FLModule:
    """Build model ``name`` from what fedsim passes (``kwargs``: the shape keywords its data
    implies, images in_channels, num_classes, image_size, text vocab_size, seq_len, num_classes;
    lr/momentum/weight_decay for a model that takes ``client.*``; ``hidden``) and the user's
    ``args`` (``model.args``), which must be names its constructor takes.

    An ``FLModule`` must take every fedsim keyword (ConfigError otherwise: the wrong kind of
    data); a plain LightningModule gets those its constructor names, and one that needs an
    argument neither fedsim nor ``model.args`` gives is a ConfigError. ``hidden`` given to a
    model without such an argument is a ConfigError too."""
    import inspect

    from fedsim.errors import ConfigError
    from lightning_modules.base import FLModule

    cls = model_class(name)
    args = dict(args or {})
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    if "hidden" in kwargs and "hidden" not in params:
        raise ConfigError(
            "model.hidden",
            list(kwargs["hidden"]),
            f"{name} takes no hidden layer sizes (only a model with a hidden argument, such "
            "as mlp, does); leave it null",
        )
    _check_args(cls, args, kwargs, params, takes_any)
    if "weights" in kwargs and "weights" not in params and not takes_any:
        kwargs = {k: v for k, v in kwargs.items() if k != "weights"}
    variant = kwargs.get("adapter_variant")
    if variant is not None and "adapter_variant" not in params and not takes_any:
        raise ConfigError(
            "model.name", name, f"{cls.__name__} takes no adapter_variant, and the algorithm "
            f"asks for the {variant!r} adapter variant: set model.name=causal_lm (or "
            "sequence_classifier)",
        )  # fmt: skip
    if issubclass(cls, FLModule) and not takes_any:
        missing = [k for k in kwargs if k not in params]
        if missing:
            raise ConfigError(
                "model.name",
                name,
                f"{cls.__name__} takes no {', '.join(missing)}, which data.name implies; "
                f"pick a model for that data ({ALLOWED})",
            )
    elif not takes_any:
        kwargs = {k: v for k, v in kwargs.items() if k in params}
        required = [
            n for n, p in list(params.items())[1:]
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and n not in kwargs and n not in args
        ]  # fmt: skip
        if required:
            raise ConfigError(
                "model.name", name, f"{cls.__name__} requires {', '.join(required)}, which "
                "fedsim cannot give it (it passes the data's shape: in_channels, num_classes, "
                "image_size or vocab_size, seq_len): set them in model.args",
            )  # fmt: skip
    return cls(**kwargs, **args)

CLIENT_SETTINGS = ("lr", "momentum", "weight_decay")  # client.<key> on fedsim's optimizer


def sets_client_settings(cls: type) -> bool:
    """Whether fedsim sets ``client.*``'s optimizer settings on ``cls`` (a built-in
    ``FLModule`` that does not own its optimizers)."""
    from lightning_modules.base import FLModule

    return isinstance(cls, type) and issubclass(cls, FLModule) and not owns_optimizers(cls)


# peft's LoraConfig names (and lora_r, a common guess) -> the built-in adapter models' own
PEFT_NAMES = {"r": "rank", "lora_r": "rank", "lora_alpha": "alpha", "lora_dropout": "dropout",
              "target_modules": "targets"}  # fmt: skip


def _check_args(
    cls: type, args: dict[str, Any], given: dict[str, Any], params: Any, takes_any: bool
) -> None:
    """ConfigError for a ``model.args`` key the constructor does not take, or one fedsim
    sets itself (the data's shapes; ``client.*`` for a model that takes them)."""
    from fedsim.errors import ConfigError
    from lightning_modules.lora_args import refuse_retired

    named = [n for n in list(params)[1:] if params[n].kind not in (
        params[n].VAR_POSITIONAL, params[n].VAR_KEYWORD)]  # fmt: skip
    retired = getattr(cls, "retired_args", {})
    # a built-in module whose optimizer is fedsim's gets these from client.* (set on it when
    # it is built: ModelBuild.apply), so model.args may not give them
    fedsim_settings = CLIENT_SETTINGS if sets_client_settings(cls) else ()
    for key, value in args.items():
        if key in retired:
            refuse_retired(key, value)
        if key in FROM_FEDSIM:
            raise ConfigError(
                f"model.args.{key}", value, "fedsim sets it (from algorithm.name, or for the "
                "driver's template); remove it from model.args",
            )  # fmt: skip
        if key in FROM_DATA:
            raise ConfigError(
                f"model.args.{key}", value, "fedsim passes it from the data (data.name); "
                "remove it from model.args",
            )  # fmt: skip
        if key == "hidden":
            raise ConfigError(f"model.args.{key}", value, "set it as model.hidden")
        if key in given or key in fedsim_settings:  # client.*: lr, momentum, weight_decay
            raise ConfigError(
                f"model.args.{key}", value, f"{cls.__name__} takes its {key} from client.{key} "
                "(its optimizer is fedsim's client.optimizer); set that instead",
            )  # fmt: skip
        ours = PEFT_NAMES.get(key)
        if ours in named and key not in named:  # a peft user's first guess
            raise ConfigError(
                f"model.args.{key}", value, f"is peft's LoraConfig name; {cls.__name__} calls "
                f"it {ours}: set model.args.{ours} (the same meaning)",
            )  # fmt: skip
        if key not in named and not takes_any:
            raise ConfigError(
                f"model.args.{key}", value, f"{cls.__name__}'s constructor takes no {key} "
                f"(it takes: {', '.join(named) or 'nothing'})",
            )  # fmt: skip
