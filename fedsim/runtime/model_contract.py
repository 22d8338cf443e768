"""What fedsim needs of a run's LightningModule, checked when the run is built (one line each).

Any ``LightningModule`` trains as Lightning users write it: its own ``configure_optimizers``
(any form Lightning accepts, ``lightning_steps.py``), a ``training_step(batch, batch_idx)``
on ``(x, y)`` batches, ``forward(x)`` giving logits, its blocks derived from its top-level
children. Every algorithm's client terms are applied by fedsim's loop around that
``training_step``, so the module needs nothing more, except what an algorithm declares in
``Algorithm.model_needs`` (MOON and FedRoD: ``features(x)``). Refused here, naming the key
and why: a method an algorithm needs, second derivatives of a frozen-base adapter model
(SP-CACW), bf16 on a CPU (``client.*`` optimizer keys a module
with its own ``configure_optimizers`` would ignore are refused with the config:
``fedsim/config/model_optimizer.py``).
"""

from __future__ import annotations

from typing import Any

from fedsim.config import ExperimentConfig
from fedsim.data.names import TOKENIZED_MODELS
from fedsim.errors import ConfigError
from fedsim.runtime.lightning_steps import defines_hook, resolve_optimizers
from fedsim.runtime.model_fit import check_features
from lightning_modules.blocks import block_names, output_layer
from lightning_modules.flat_params import has_frozen_base
from lightning_modules.registry import is_builtin, owns_optimizers

FEATURES_EXAMPLE = (
    "def features(self, x): return <what the output layer reads>; and forward(x) = "
    "output_layer(features(x))"
)


def own_optimizers(module: Any) -> bool:
    """Whether the module's class defines ``configure_optimizers`` itself (not FLModule's)."""
    return owns_optimizers(type(module))


def check_needs(cfg: ExperimentConfig, module: Any, algorithm: Any, sample: Any) -> None:
    """ConfigError for a method ``algorithm.model_needs`` that the module does not define."""
    name = type(module).__name__
    for need in algorithm.model_needs:
        if not callable(getattr(module, need, None)) and is_builtin(cfg.model.name):
            predicts_tokens = TOKENIZED_MODELS.get(cfg.model.name) == "next_token"
            what = (
                "a language model, without an output layer of classes"
                if predicts_tokens
                else f"built in and has no {need}"
            )
            raise ConfigError(
                "algorithm.name", cfg.algorithm.name,
                f"calls the model's {need}(x), the input of a classifier's output layer, and "
                f"model.name={cfg.model.name} is {what}: pick another algorithm (or a "
                f"module of your own that defines {need})",
            )  # fmt: skip
        if not callable(getattr(module, need, None)):
            raise ConfigError(
                "model.name", cfg.model.name,
                f"algorithm.name={cfg.algorithm.name} calls {name}.{need}(x), which it does "
                f"not define; add it ({FEATURES_EXAMPLE})",
            )  # fmt: skip
        if need == "features" and sample is not None:
            check_features(module, sample, output_layer(module), cfg.model.name)


def check_model(
    cfg: ExperimentConfig, module: Any, algorithm: Any, device: str, sample: Any = None
) -> None:
    """ConfigError for what this run asks of ``module`` that it cannot give (see module doc)."""
    name = type(module).__name__
    own = own_optimizers(module)
    if own and not defines_hook(type(module), "configure_optimizers"):
        raise ConfigError(
            "model.name", cfg.model.name,
            f"{name} defines no configure_optimizers (Lightning needs one too); add it, or "
            "subclass lightning_modules.base.FLModule to train with client.optimizer",
        )  # fmt: skip
    try:  # its return value is one Lightning accepts
        resolve_optimizers(module)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - the user's code on the user's values: one line
        key, value = ("model.args", cfg.model.args) if cfg.model.args else ("model.name", name)
        raise ConfigError(
            key, value, f"{name}.configure_optimizers raised {type(err).__name__}: "
            f"{' '.join(str(err).split())[:200]}",
        ) from None  # fmt: skip
    check_needs(cfg, module, algorithm, sample)
    if algorithm.trains_by_exchange and has_frozen_base(module):
        raise ConfigError(
            "algorithm.name", cfg.algorithm.name, f"estimates curvature by differentiating "
            f"{name} twice (Hessian-vector products), which a pretrained transformer's fused "
            "attention does not support; pick an algorithm that trains locally",
        )  # fmt: skip
    if not block_names(module):
        raise ConfigError("model.name", cfg.model.name, f"{name} has no block with parameters")
    if cfg.client.precision == "bf16-mixed" and not str(device).startswith("cuda"):
        raise ConfigError(
            "client.precision", "bf16-mixed",
            "autocasts on CUDA only; on a CPU bfloat16 is slower than float32 here: use 32",
        )  # fmt: skip


def model_notes(cfg: ExperimentConfig, module: Any, algorithm: Any) -> list[str]:
    """One line each for a part of the user's module that this algorithm does not use (it is
    not an error: the algorithm's rule defines the client's training)."""
    from lightning_modules.base import FLModule

    name, algo = type(module).__name__, f"algorithm.name={cfg.algorithm.name}"
    own_step = type(module).training_step is not FLModule.training_step
    notes = []
    if algorithm.own_objective and own_step and _objective_on(cfg):
        notes.append(
            f"{algo} trains on its own objective ({algorithm.own_objective}); "
            f"{name}.training_step is not called"
        )
    own = own_optimizers(module)
    if (algorithm.trains_in_own_loop or algorithm.trains_by_exchange) and (own or own_step):
        how = "in its own loop" if algorithm.trains_in_own_loop else "by gradient exchange"
        unused = [f"{name}'s optimizer"] * own + [f"{name}.training_step"] * own_step
        lr = f"{name}'s own learning rate" if own else "client.lr"
        notes.append(
            f"{algo} steps plain SGD on cross-entropy gradients {how} (its update rule) at "
            f"{lr}; {' and '.join(unused)} {'are' if len(unused) > 1 else 'is'} not used"
        )
    return notes


def _objective_on(cfg: ExperimentConfig) -> bool:
    """MOON with mu 0 trains on cross-entropy through training_step (it is FedAvg)."""
    return getattr(cfg.algorithm.params, "mu", 1) != 0
