"""Which W&B mode a run gets: ``online`` only with credentials and a reachable host.

``WANDB_MODE=offline`` / ``disabled`` in the environment override an ``online`` config;
``online`` falls back to offline when there is no API key or the W&B host cannot be reached.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

DEFAULT_HOST = "https://api.wandb.ai"


def has_credentials(host: str) -> bool:
    """An API key in the environment, an identity token, or a netrc entry for ``host``."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    try:
        from wandb.sdk.lib.wbauth.wbnetrc import read_netrc_auth

        return bool(read_netrc_auth(host=host))
    except Exception:  # noqa: BLE001 - wandb internals move between versions
        netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
        hostname = urlparse(host).hostname or host
        return netrc.is_file() and hostname in netrc.read_text(errors="ignore")


def host_reachable(host: str, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the W&B host opens within ``timeout`` seconds."""
    url = urlparse(host)
    port = url.port or (443 if url.scheme != "http" else 80)
    try:
        with socket.create_connection((url.hostname or host, port), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_mode(requested: str) -> tuple[str, str]:
    """The mode to use and why: env ``WANDB_MODE`` may only lower it; online needs key + net."""
    env = os.environ.get("WANDB_MODE", "").strip().lower()
    if env in ("offline", "dryrun") and requested == "online":
        return "offline", "WANDB_MODE=offline"
    if env == "disabled":
        return "disabled", "WANDB_MODE=disabled"
    if requested != "online":
        return requested, f"mode: {requested}"
    host = os.environ.get("WANDB_BASE_URL", DEFAULT_HOST)
    if not has_credentials(host):
        return "offline", "no W&B API key (WANDB_API_KEY or `wandb login`)"
    if not host_reachable(host):
        return "offline", f"{host} is not reachable"
    return "online", "API key and network present"
