"""FLModule: the built-in models' base: cross-entropy, ``client.optimizer``, named blocks.

A plain ``LightningModule`` needs none of it: fedsim applies every algorithm's client terms
around any module's own ``training_step`` (``fedsim/runtime/training.py``).
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from lightning_modules import blocks


class FLModule(pl.LightningModule):
    """Base of the built-in models: CE loss, ``client.optimizer`` (SGD by default), blocks.

    Subclasses define ``forward``, ``features`` (the input of the output layer: MOON and
    FedRoD read it) and ``block_names`` (bottom to top; the last block is the head, i.e. the
    output layer). fedsim drives ``training_step`` from a lean loop inside its workers and
    adds the algorithm's client terms itself, exactly as for a plain LightningModule; the
    module also trains under a plain ``pl.Trainer``.
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

    # --- training ---
    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int = 0):
        """Cross-entropy on the minibatch (fedsim adds the algorithm's terms around it)."""
        x, y = batch
        return F.cross_entropy(self(x), y)

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
