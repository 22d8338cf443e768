"""The hook points an algorithm plugs into a client's training: pure functions of parameters."""

from __future__ import annotations

import torch


class ClientTerms:
    """Client-side behaviour of an algorithm (WDR, proximal terms, SCAFFOLD corrections...).

    A base with no-op defaults: an algorithm's terms override only the hook they use. Both
    methods receive the module's parameters by name and must not touch anything else, so the
    same terms work for every model that declares its blocks. The module calls them
    duck-typed, so any object with these two methods also works.
    """

    def loss(self, params: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Extra loss added to the minibatch loss (differentiable), or None (default)."""
        return None

    def correct_gradients(self, params: dict[str, torch.Tensor]) -> None:
        """Adjust ``p.grad`` in place after backward and before the optimizer step (default:
        nothing)."""
        return None
