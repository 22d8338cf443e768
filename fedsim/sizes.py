"""How many bytes the tensors inside a payload hold (communication accounting, spilling)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch


def nbytes(obj: Any) -> int:
    """Bytes held by the tensors and arrays inside ``obj`` (containers and dataclasses).

    A tensor reached twice (the same object under two keys) is counted once.
    """
    return _nbytes(obj, set())


def _nbytes(obj: Any, seen: set[int]) -> int:
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            return obj.numel() * obj.element_size()
        return int(obj.nbytes)
    if isinstance(obj, dict):
        return sum(_nbytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v, seen) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(_nbytes(getattr(obj, f.name), seen) for f in dataclasses.fields(obj))
    return 0
