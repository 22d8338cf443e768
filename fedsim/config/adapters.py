"""Config section ``adapters``: a LoRA run's adapters written as peft folders, and the adapter
a run starts from (``fedsim/runtime/adapter_export.py`` writes and reads them)."""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.checks import checked


def _folder_ok(value: object) -> bool:
    return value is None or (isinstance(value, str) and bool(value.strip()))


@dataclass
class AdaptersConfig:
    """``adapters``: a run with a LoRA adapter writes it (global, and each client's personal
    one) as peft ``save_pretrained`` folders under ``<run>/adapters/`` at its end."""

    save_every: int = checked(  # also every N rounds, in adapters/round-<N>/ (0: the end only)
        0,
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        "must be an integer >= 0 (0: only at the end of the run)",
    )
    start_from: str | None = checked(  # a peft adapter folder the global adapter starts from
        None, _folder_ok, "a peft save_pretrained folder (or null: a new adapter)"
    )
