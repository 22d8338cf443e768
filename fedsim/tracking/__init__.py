"""Where results go: run-folder files, the progress bar (W&B and plots in their own files)."""

from fedsim.tracking.base import RoundRecord, Sink

__all__ = ["RoundRecord", "Sink"]
