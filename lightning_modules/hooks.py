"""The hook points an algorithm plugs into a client's training: pure functions of parameters."""

from __future__ import annotations

import torch


class ClientTerms:
    """Client-side behaviour of an algorithm (WDR, proximal terms, SCAFFOLD corrections...).

    A base with no-op defaults: an algorithm's terms override only the hook they use.
    fedsim's training loop calls them around the module's own ``training_step`` (the module
    never sees them): ``loss`` is added to the step's loss, ``correct_gradients`` runs after
    ``backward`` and before the optimizer step. Both receive the module's parameters by name
    and must not touch anything else, so the same terms work for every model; ``objective``
    replaces the module's ``training_step`` loss itself (it may call ``module.features``: an
    algorithm that does declares it in ``Algorithm.model_needs``). Called duck-typed, so any
    object with these methods also works.
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
