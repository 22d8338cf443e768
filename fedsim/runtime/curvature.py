"""Top Hessian eigenvalue by Hessian-vector products (double backprop) and power iteration.

The local smoothness constant L of a client's loss at given parameters, without forming the
Hessian (Pearlmutter's trick: H v = d/dw (grad f(w) . v)). Algorithm-agnostic: SP-CACW asks
for it through a ``CurvatureTask``; anything else may.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from fedsim.data.federated import FederatedData
from fedsim.runtime.training import prepare_batch
from lightning_modules.base import FLModule

Vectors = list[torch.Tensor]
# Up to this many samples, each chunk's gradient graph is built once and every product of
# the power iteration differentiates it again (bit-identical to rebuilding it: the same
# operations on the same values; a product costs ~2/3 as much). Above it the graphs are
# rebuilt per product, so memory stays one chunk's.
KEEP_GRAPHS_SAMPLES = 512


def _dot(a: Vectors, b: Vectors) -> torch.Tensor:
    return sum((x * y).sum() for x, y in zip(a, b, strict=True))


def power_iteration(
    hvp: Callable[[Vectors], Vectors],
    shapes: list[torch.Size],
    iterations: int,
    generator: torch.Generator,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> float:
    """Eigenvalue of largest magnitude of the symmetric operator ``hvp`` (Rayleigh quotient).

    ``iterations`` products from a seeded Gaussian start; stops early on convergence.
    """
    v = [torch.randn(s, generator=generator, dtype=dtype).to(device) for s in shapes]
    norm = torch.sqrt(_dot(v, v))
    v = [x / norm for x in v]
    eigenvalue = 0.0
    for _ in range(max(1, iterations)):
        hv = hvp(v)
        new = float(_dot(v, hv))
        norm = torch.sqrt(_dot(hv, hv))
        if not torch.isfinite(norm) or float(norm) == 0.0:
            return new
        v = [x / norm for x in hv]
        converged = abs(new - eigenvalue) <= 1e-3 * max(abs(new), 1e-12)
        eigenvalue = new
        if converged:
            break
    return eigenvalue


def hessian_top_eigenvalue(
    module: FLModule,
    data: FederatedData,
    indices: np.ndarray,
    *,
    batch_size: int,
    iterations: int,
    generator: torch.Generator,
    device: torch.device | None = None,
) -> float:
    """Top |eigenvalue| (signed) of the Hessian of the mean CE loss of ``module`` on ``indices``.

    Eval mode; the Hessian-vector product is summed over chunks of ``batch_size`` samples
    (``KEEP_GRAPHS_SAMPLES``: when the chunks' gradient graphs are kept between products).
    """
    module.eval()
    params = [p for p in module.parameters() if p.requires_grad]
    n = max(len(indices), 1)
    batches = [
        prepare_batch(data.batch(indices[start : start + batch_size]), device)
        for start in range(0, len(indices), batch_size)
    ]

    def gradient_graph(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        loss = torch.nn.functional.cross_entropy(module(x), y, reduction="sum") / n
        return torch.autograd.grad(loss, params, create_graph=True)

    kept = [gradient_graph(x, y) for x, y in batches] if n <= KEEP_GRAPHS_SAMPLES else None

    def hvp(v: Vectors) -> Vectors:
        total = [torch.zeros_like(p) for p in params]
        for index, (x, y) in enumerate(batches):
            grads = kept[index] if kept is not None else gradient_graph(x, y)
            hv = torch.autograd.grad(_dot(list(grads), v), params, retain_graph=kept is not None)
            for acc, h in zip(total, hv, strict=True):
                acc.add_(h.detach())
        return total

    return power_iteration(hvp, [p.shape for p in params], iterations, generator, device)
