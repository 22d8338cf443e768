"""Figure specs: what an algorithm wants drawn from its state, as plain data.

An algorithm hands these to tracking (``Algorithm.figures``): cwFedAvg its per-client
output-row norms beside the class proportions, later SP-CACW its collaboration weights and
IFCA its cluster assignments. ``fedsim.tracking.plots`` draws them; it never imports an
algorithm, and an algorithm never imports tracking: both import this module only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PANEL_KINDS = ("heatmap", "lines")


@dataclass(frozen=True)
class Panel:
    """One axes: a heatmap of a 2-D array, or line series (one line per row of ``values``)."""

    values: np.ndarray  # heatmap: (rows, columns); lines: (lines, points)
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    kind: str = "heatmap"  # heatmap | lines
    x: np.ndarray | None = None  # lines: the x of each point (default 0, 1, ...)
    labels: tuple[str, ...] = ()  # lines: one legend entry per row (default: no legend)
    groups: tuple[int, ...] = ()  # lines: one group per row; a group's lines share a colour

    def __post_init__(self) -> None:
        if self.kind not in PANEL_KINDS:
            raise ValueError(f"Panel.kind={self.kind!r}: allowed {', '.join(PANEL_KINDS)}")
        values = np.asarray(self.values, dtype=np.float64)
        if values.ndim != 2:
            raise ValueError(f"Panel.values must be 2-D, got shape {values.shape}")
        object.__setattr__(self, "values", values)
        if self.x is not None and len(self.x) != values.shape[1]:
            raise ValueError(f"Panel.x has {len(self.x)} points, values {values.shape[1]}")
        if self.labels and len(self.labels) != values.shape[0]:
            raise ValueError(f"Panel.labels has {len(self.labels)} names, values {values.shape[0]}")
        if self.groups and len(self.groups) != values.shape[0]:
            raise ValueError(f"Panel.groups has {len(self.groups)} ids, values {values.shape[0]}")


@dataclass(frozen=True)
class Figure:
    """One PNG in ``<run_dir>/plots/``: panels side by side under one title."""

    filename: str  # a plain file name, e.g. "row_norms.png"
    title: str  # tracking puts the run (name, algorithm, round) in front of it
    panels: tuple[Panel, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if "/" in self.filename or not self.filename.endswith(".png"):
            raise ValueError(f"Figure.filename={self.filename!r}: a plain name ending in .png")
        if not self.panels:
            raise ValueError(f"Figure {self.filename!r} has no panels")
        object.__setattr__(self, "panels", tuple(self.panels))
