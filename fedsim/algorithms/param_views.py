"""Views of a flat parameter vector by name, on the device a client trains on."""

from __future__ import annotations

import torch

from lightning_modules.flat_params import ParamLayout


class NamedViews:
    """Views of a flat vector by parameter name, moved once to the device training runs on
    (client terms hold CPU tensors; a GPU worker's parameters live on the GPU)."""

    def __init__(self, flat: torch.Tensor, layout: ParamLayout):
        self.flat, self.layout = flat, layout
        self._device: torch.device | None = None
        self._views: dict[str, torch.Tensor] = {}

    def on(self, device: torch.device) -> dict[str, torch.Tensor]:
        """Every tensor of the vector by name, on ``device`` (moved on the first call)."""
        if self._device != device:
            moved = self.flat.to(device)
            self._views = {e.name: self.layout.view(moved, e.name) for e in self.layout.entries}
            self._device = device
        return self._views


def device_of(params: dict[str, torch.Tensor]) -> torch.device:
    """The device of a module's parameters (all on one device)."""
    return next(iter(params.values())).device
