"""One optimizer step of a client's training, over one or more micro-batches.

The module's loss (or the algorithm's objective), the terms' loss, backward, the terms'
corrections, the module's hooks, the clip and the step, in the order Lightning's Trainer runs
its hooks. With gradient accumulation (``client.grad_accumulation`` k) each micro-batch's
loss is divided by k before its backward (as Lightning's ``accumulate_grad_batches``) and
the corrections, clip and step follow the k-th (or a pass's last) micro-batch; with a
warm-up (``client.warmup_steps`` w) optimizer step i (from 0) takes each parameter group's
lr times min(1, (i + 1) / w).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch

from fedsim.runtime.lightning_steps import defined_hooks, step_loss
from lightning_modules.flat_params import state_parameters
from lightning_modules.hooks import ClientTerms


class TrainStep:
    """Trains on one micro-batch per call; ``taken``: the optimizer steps taken so far."""

    def __init__(
        self,
        module: Any,
        optimizer: torch.optim.Optimizer,
        terms: ClientTerms | None,
        clip_grad_norm: float | None,
        bf16: bool,
        accumulation: int = 1,
        warmup_steps: int = 0,
    ):
        self.module, self.optimizer, self.clip = module, optimizer, clip_grad_norm
        self.accumulation, self.warmup = accumulation, warmup_steps
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]  # the round's
        self.taken, self.pending = 0, 0  # optimizer steps taken; micro-batches since the last
        self.hooks = defined_hooks(module)
        self.objective = getattr(terms, "objective", None)
        self.extra = getattr(terms, "loss", None)
        self.correct = getattr(terms, "correct_gradients", None)
        # the parameters by name, as the terms read them (the same tensors every step)
        self.params = dict(state_parameters(module)) if terms is not None else {}
        self.autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        )
        self.where = type(module).__name__

    def hook(self, name: str, *args: Any) -> Any:
        """The module's Lightning hook ``name``, where its class defines one."""
        return getattr(self.module, name)(*args) if name in self.hooks else None

    def __call__(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int, last: bool = False
    ) -> float | None:
        """Train on ``batch`` (``last``: the pass's last batch, which ends an accumulation);
        its loss as a float (None: the module skipped it)."""
        module, optimizer = self.module, self.optimizer
        if self.pending == 0:
            self.hook("on_before_zero_grad", optimizer)
            optimizer.zero_grad(set_to_none=True)
        with self.autocast:
            loss = None if self.objective is None else self.objective(module, batch)
            if loss is None:
                loss = step_loss(module.training_step(batch, batch_idx), self.where)
                if loss is None:
                    return None
            if self.extra is not None:
                extra = self.extra(self.params)
                if extra is not None:
                    loss = loss + extra
        value = float(loss.detach())
        if not math.isfinite(value):
            return value
        self.hook("on_before_backward", loss)
        (loss if self.accumulation == 1 else loss / self.accumulation).backward()
        self.hook("on_after_backward")
        self.pending += 1
        if self.pending == self.accumulation or last:
            self._step()
        self.hook("on_train_batch_end", loss, batch, batch_idx)
        return value

    def _step(self) -> None:
        """The accumulated gradient's corrections, clip and optimizer step (warmed up)."""
        module, optimizer = self.module, self.optimizer
        if self.correct is not None:
            self.correct(self.params)
        self.hook("on_before_optimizer_step", optimizer)
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(module.parameters(), self.clip)
        if self.warmup and self.taken <= self.warmup:
            factor = min(1.0, (self.taken + 1) / self.warmup)
            for group, base in zip(optimizer.param_groups, self.base_lrs, strict=True):
                group["lr"] = base * factor
        optimizer.step()
        self.taken += 1
        self.pending = 0
