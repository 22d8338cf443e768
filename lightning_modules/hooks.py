"""The hook points an algorithm plugs into a client's training: pure functions of parameters."""

from __future__ import annotations

from typing import Protocol

import torch


class ClientTerms(Protocol):
    """Client-side behaviour of an algorithm (WDR, proximal terms, SCAFFOLD corrections...).

    Both methods receive the module's parameters by name; they must not touch anything else,
    so the same terms work for every model that declares its blocks.
    """

    def loss(self, params: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Extra loss added to the minibatch loss (differentiable), or None."""
        ...

    def correct_gradients(self, params: dict[str, torch.Tensor]) -> None:
        """Adjust ``p.grad`` in place after backward and before the optimizer step."""
        ...
