"""FLModule: a LightningModule whose training step calls an algorithm's client terms."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from lightning_modules import blocks
from lightning_modules.hooks import ClientTerms


class FLModule(pl.LightningModule):
    """Base for every fedsim model: CE loss + client terms, SGD, and named blocks.

    Subclasses define ``forward`` and ``block_names`` (bottom to top; the last block is the
    head, i.e. the output layer). fedsim drives ``training_step`` and
    ``on_before_optimizer_step`` from a lean loop inside its workers and passes the
    algorithm's client terms to both as ``terms`` (the module keeps no per-client state); the
    module also trains under a plain ``pl.Trainer`` (no terms). A subclass that overrides
    either hook keeps the ``terms`` keyword.
    """

    def __init__(self, lr: float = 0.005, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__()
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay

    # --- blocks: the named split of parameters that FedPer, cwFedAvg... use ---
    block_names: tuple[str, ...] = ()

    def block_parameters(self, block: str) -> list[str]:
        """Names of the parameters (and float buffers) that belong to ``block``."""
        return blocks.block_parameters(self)[block]

    def head_parameters(self, num_blocks: int = 1) -> list[str]:
        """Parameter names of the top ``num_blocks`` blocks (1 = the output layer)."""
        return blocks.head_parameters(self, num_blocks)

    def body_parameters(self, num_head_blocks: int = 1) -> list[str]:
        """Parameter names below the top ``num_head_blocks`` blocks."""
        head = set(self.head_parameters(num_head_blocks))
        return [n for b in self.block_names for n in self.block_parameters(b) if n not in head]

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The input to the output layer (the representation MOON and FedRoD work on):
        ``forward(x)`` must equal the output layer applied to it. Built-in models define it."""
        raise NotImplementedError(f"{type(self).__name__} does not expose its features")

    # --- training ---
    def param_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.named_parameters())

    def training_step(
        self,
        batch: tuple[torch.Tensor, torch.Tensor],
        batch_idx: int = 0,
        terms: ClientTerms | None = None,
    ):
        """Cross-entropy on the minibatch plus the client terms' extra loss, if any."""
        x, y = batch
        objective = None if terms is None else getattr(terms, "objective", None)
        loss = objective(self, batch) if objective is not None else None
        if loss is None:
            loss = F.cross_entropy(self(x), y)
        if terms is not None:
            extra = terms.loss(self.param_dict())
            if extra is not None:
                loss = loss + extra
        return loss

    def on_before_optimizer_step(
        self, optimizer: torch.optim.Optimizer, terms: ClientTerms | None = None
    ) -> None:
        """Let the client terms correct the gradients (SCAFFOLD) before the step."""
        if terms is not None:
            terms.correct_gradients(self.param_dict())

    # client.optimizer and its keys (set by fedsim's worker; plain SGD until then)
    optimizer_name: str = "sgd"  # sgd | adam | adamw
    betas: tuple[float, float] = (0.9, 0.999)  # adam / adamw
    nesterov: bool = False  # sgd

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """``client.optimizer`` over every parameter (SGD by default). A worker trains client
        after client on this module, so the optimizer is built once and handed out again with
        its state (momentum buffers, Adam's moments and step) cleared: the same steps as a new
        one, without ~0.2 ms of construction per client."""
        hyper = (
            self.optimizer_name, self.lr, self.momentum, self.weight_decay, tuple(self.betas),
            self.nesterov,
        )  # fmt: skip
        cached = self.__dict__.get("_fedsim_optimizer")
        if cached is None or cached[0] != hyper:
            cached = self.__dict__["_fedsim_optimizer"] = (hyper, self._build_optimizer())
        optimizer = cached[1]
        optimizer.state.clear()
        return optimizer

    def _build_optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer_name == "sgd":
            return torch.optim.SGD(
                self.parameters(), lr=self.lr, momentum=self.momentum,
                weight_decay=self.weight_decay, nesterov=self.nesterov,
            )  # fmt: skip
        cls = torch.optim.Adam if self.optimizer_name == "adam" else torch.optim.AdamW
        return cls(
            self.parameters(), lr=self.lr, betas=tuple(self.betas), weight_decay=self.weight_decay
        )

    # --- evaluation under a plain Trainer ---
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int = 0):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)
