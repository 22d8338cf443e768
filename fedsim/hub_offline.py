"""Whether this process may reach the Hugging Face Hub: the one offline rule of every Hub
access (a pretrained model, ``fedsim/pretrained.py``; an ``hf:`` dataset,
``fedsim/data/hf/open.py``).

huggingface_hub's own rule, read from the environment at each call (a test or a notebook may
set it after huggingface_hub was imported, which reads it once): ``HF_HUB_OFFLINE`` (or,
where that is unset or empty, ``TRANSFORMERS_OFFLINE``) is 1, on, yes or true, in any case.
Imports neither torch nor huggingface_hub.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
TRUE_VALUES = ("1", "ON", "YES", "TRUE")  # huggingface_hub's ENV_VARS_TRUE_VALUES


def offline_reason(environ: Mapping[str, str] | None = None) -> str | None:
    """Why the Hub must not be tried (``"HF_HUB_OFFLINE is set"``), or None: the first of
    ``OFFLINE_VARIABLES`` set to a non-empty value decides (``environ``: ``os.environ``)."""
    env = os.environ if environ is None else environ
    for name in OFFLINE_VARIABLES:
        value = env.get(name)
        if value:
            return f"{name} is set" if value.upper() in TRUE_VALUES else None
    return None


__all__ = ["OFFLINE_VARIABLES", "TRUE_VALUES", "offline_reason"]
