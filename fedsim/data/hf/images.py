"""Images of an ``hf:`` dataset as fedsim's uint8 (N, C, H, W) arrays: PIL images or 2-D /
3-D arrays, grey kept grey, colour as RGB, resized to ``data.resize`` when set."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsim.errors import ConfigError


def pil_array(image: Any) -> np.ndarray:
    """A PIL image as uint8 (H, W) for grey or (H, W, 3) for anything else."""
    if image.mode not in ("L", "RGB"):
        image = image.convert("L" if image.mode in ("1", "I", "I;16", "F") else "RGB")
    return np.asarray(image)


def stack_images(source: Any, arrays: list[np.ndarray]) -> np.ndarray:
    """uint8 (N, C, H, W): grey if every image is, resized to data.resize when set; images of
    different sizes (or not square) without data.resize are a ConfigError."""
    arrays = [a[:, :, None] if a.ndim == 2 else a for a in arrays]
    if any(a.ndim != 3 for a in arrays):
        raise ConfigError("data.input_column", source.input_columns[0], "arrays must be 2-D or 3-D")
    if not all(a.shape[2] == 1 for a in arrays):
        arrays = [np.repeat(a, 3, axis=2) if a.shape[2] == 1 else a[:, :, :3] for a in arrays]
    arrays = [_as_uint8(a) for a in arrays]
    if source.resize is not None:
        arrays = [_resize(a, source.resize) for a in arrays]
    sizes = sorted({a.shape[:2] for a in arrays})
    if len(sizes) > 1 or (sizes and sizes[0][0] != sizes[0][1]):
        shown = ", ".join(f"{h}x{w}" for h, w in sizes[:4]) + (", ..." if len(sizes) > 4 else "")
        raise ConfigError(
            "data.resize", None, f"the images of {source.input_columns[0]} are {shown}, not one "
            "square size: set data.resize to a side length (e.g. 28)",
        )  # fmt: skip
    if not arrays:
        raise ConfigError("data.split", source.split, "that split holds no rows")
    return np.ascontiguousarray(np.stack(arrays).transpose(0, 3, 1, 2))


def _as_uint8(array: np.ndarray) -> np.ndarray:
    """Pixels 0..255 (floats in 0..1 are scaled)."""
    if array.dtype == np.uint8:
        return array
    scale = 255.0 if np.issubdtype(array.dtype, np.floating) and array.max() <= 1.0 else 1.0
    return np.clip(np.rint(array.astype(np.float64) * scale), 0, 255).astype(np.uint8)


def _resize(array: np.ndarray, side: int) -> np.ndarray:
    from PIL import Image

    if array.shape[:2] == (side, side):
        return array
    grey = array.shape[2] == 1
    image = Image.fromarray(array[:, :, 0] if grey else array)
    resized = np.asarray(image.resize((side, side), Image.Resampling.BILINEAR))
    return resized[:, :, None] if grey else resized
