"""A second LoRA adapter beside an adapted model's first (the ``personal`` adapter variant,
which FedDPA declares and ``adapters.build_adapter`` applies), and how the two combine per
instance: FedDPA's global and personal adapters on one frozen base.

peft holds both adapters on the same linear modules: ``<module>.lora_A.default`` /
``lora_B.default`` (the global adapter) and ``<module>.lora_A.personal`` / ``lora_B.personal``.
An adapted module computes ``W0 x + s_g B_g A_g x + s_p B_p A_p x`` (each product scaled by
alpha / r as peft scales it), with per-instance scales

    s_g(x) = g + w c(x),    s_p(x) = p - w c(x),    c(x) = <e(x) / |e(x)|, m>

from the model's ``dual.mix`` = (g, p, w, f) and ``dual.reference`` = m, both entries of the
flat vector like the adapters: whoever writes the vector chooses the combination (an algorithm
never reaches into the module). ``e(x)`` is the last layer's hidden state with the personal
adapter alone (s_g = 0, s_p = 1) at the last token of the instance's prefix of
``max(1, floor(f L))`` of its L real tokens: a causal model computes it from that prefix
alone (f = 1: the last real token, the whole window; FedDPA's code: the prompt). m is a mean of unit
vectors of such states, so w c(x) is w times the mean cosine similarity between x and the
instances m was taken from (FedDPA's instance-wise weight). With w = 0 no embedding pass runs.

``mix`` and ``reference`` never train: the forward reads them detached, so they get no
gradient (an optimizer skips them) and keep what the vector says. Built as (1, 1, 0) and 0,
the model is the base plus both adapters, for an algorithm that knows nothing of them (f = 1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

GLOBAL = "default"  # peft's name for the first adapter
PERSONAL = "personal"
MIX = "dual.mix"  # (g, p, w) in the flat vector
REFERENCE = "dual.reference"  # m


class DualAdapter(nn.Module):
    """The combination's entries (``mix``, ``reference``) and the hooks that scale each
    adapter's output per instance; ``add_personal_adapter`` builds it on a peft model."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.mix = nn.Parameter(torch.tensor([1.0, 1.0, 0.0, 1.0]))
        self.reference = nn.Parameter(torch.zeros(hidden_size))
        self._scales: dict[str, torch.Tensor] | None = None

    def _scale(self, adapter: str) -> Callable[..., torch.Tensor]:
        def hook(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
            if self._scales is None:
                return output
            scale = self._scales[adapter].to(output.dtype)
            return output * scale.view(-1, *([1] * (output.dim() - 1)))

        return hook

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """e(x) / |e(x)| per instance (B, hidden): the last layer's hidden state at the last
        token of its prefix (``mix``'s f of its real tokens), with the personal adapter alone."""
        lm, batch = self.__dict__["_lm"], x.shape[0]
        previous = self._scales
        self._scales = {GLOBAL: torch.zeros(batch, device=x.device),
                        PERSONAL: torch.ones(batch, device=x.device)}  # fmt: skip
        try:
            mask = x >= 0
            out = lm(input_ids=x.clamp(min=0), attention_mask=mask.long(), use_cache=False,
                     output_hidden_states=True)  # fmt: skip
        finally:
            self._scales = previous
        share = float(self.mix.detach()[3])
        real = mask.long().sum(1)
        last = torch.floor(real * share).long().clamp(min=1) - 1 if share < 1 else (
            real.clamp(min=1) - 1)  # fmt: skip
        embedding = out.hidden_states[-1][torch.arange(batch, device=x.device), last].float()
        return torch.nn.functional.normalize(embedding, dim=-1)

    @contextmanager
    def mixing(self, x: torch.Tensor) -> Iterator[None]:
        """Inside the block, the adapters are scaled for the instances of ``x``."""
        g, p, w = (float(v) for v in self.mix.detach()[:3])
        batch = x.shape[0]
        try:
            if w != 0:
                with torch.no_grad():
                    c = self.embed(x) @ self.reference.detach().to(x.device)
            else:
                c = torch.zeros(batch, device=x.device)
            self._scales = {GLOBAL: g + w * c, PERSONAL: p - w * c}
            yield
        finally:
            self._scales = None


def add_personal_adapter(lm: nn.Module, config: Any, hidden_size: int) -> DualAdapter:
    """Add the ``personal`` adapter (``config``, as the first's) to peft model ``lm``, make
    both active and trainable, and hook each adapter's B so the ``DualAdapter`` scales it."""
    lm.add_adapter(PERSONAL, config)
    lm.base_model.set_adapter([GLOBAL, PERSONAL])
    dual = DualAdapter(hidden_size)
    dual.__dict__["_lm"] = lm  # not a submodule: the model's parameters stay under ``lm``
    for name, module in lm.named_modules():
        for adapter in (GLOBAL, PERSONAL):
            if name.endswith(f".lora_B.{adapter}"):
                module.register_forward_hook(dual._scale(adapter))
    return dual
