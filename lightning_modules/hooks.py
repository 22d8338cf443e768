"""The hook points an algorithm plugs into a client's training: pure functions of parameters."""

from __future__ import annotations

import torch


class ClientTerms:
    """Client-side behaviour of an algorithm (WDR, proximal terms, SCAFFOLD corrections...).

    A base with no-op defaults: an algorithm's terms override only the hook they use.
    ``loss`` and ``correct_gradients`` receive the module's parameters by name and must not
    touch anything else, so the same terms work for every model that declares its blocks;
    ``objective`` replaces the minibatch loss itself (it may call ``module.features``). The
    module calls them duck-typed, so any object with these methods also works.
    """

    def objective(
        self, module: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
    ) -> torch.Tensor | None:
        """The minibatch loss in place of cross-entropy on ``module(x)`` (MOON's contrastive
        term on the features, FedRoD's balanced softmax), or None (default: cross-entropy).
        ``loss`` is still added to it."""
        return None

    def loss(self, params: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Extra loss added to the minibatch loss (differentiable), or None (default)."""
        return None

    def correct_gradients(self, params: dict[str, torch.Tensor]) -> None:
        """Adjust ``p.grad`` in place after backward and before the optimizer step (default:
        nothing)."""
        return None
