"""Join or start Ray once, the same way for the executor, Tune searches and reproductions.

Joining a cluster is bounded: Ray's own ``ray.init(address=...)`` retries a silent address
for many minutes, printing GCS connection errors. We first knock on the address's port
(until ``connect_timeout_s``), then let Ray connect with its GCS timeouts cut to what is
left, and turn a cluster that never answers into one ``ConfigError`` line. A private local
Ray gets a reaper: its processes die with the driver, even on ``kill -9``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator

import ray

from fedsim.errors import ConfigError
from fedsim.runtime.ray_reaper import local_ray_pids, start_reaper

DEFAULT_CONNECT_TIMEOUT_S = 15.0
PROBE_INTERVAL_S = 0.25  # between knocks on a port that refuses (a cluster may be starting)
# How a private local Ray is started (unless the environment says otherwise): it listens on
# loopback only, so no token auth files; workers at normal priority, as they are the job
# (Ray's default nice 15 starves them on a busy machine).
PRIVATE_RAY_ENVIRONMENT = {"RAY_AUTH_MODE": "disabled", "RAY_worker_niceness": "0"}


def join_or_start_ray(
    address: str | None,
    num_cpus: int | None = None,
    py_modules: list[str] | None = None,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
) -> bool:
    """Use the Ray this process already joined, else ``address`` / ``RAY_ADDRESS``, else
    start a private local cluster (``num_cpus``: None = every core).

    ``py_modules``: local modules or packages of user code (``fedsim.plugins``) that every
    worker of this job imports (Ray uploads them once); ignored when Ray was already
    joined, where the executor ships them per actor. ``connect_timeout_s``: how long a
    cluster at ``address`` has to answer; then a ConfigError naming the address.
    Returns True when this call initialized Ray, so the caller shuts it down when done.
    """
    if ray.is_initialized():
        return False
    job = {"runtime_env": {"py_modules": list(py_modules)}} if py_modules else {}
    key = "runtime.address"
    if not address and os.environ.get("RAY_ADDRESS"):
        key, address = "RAY_ADDRESS", os.environ["RAY_ADDRESS"]
    if address and address != "local":
        connect_ray(address, connect_timeout_s, key=key, **job)
        return True
    use_private_ray_defaults()
    ray.init(
        address="local",  # a new cluster, even if another one runs on this machine
        num_cpus=num_cpus,
        include_dashboard=False,  # Ray still starts its per-node agents: the reaper ends them
        logging_level=logging.WARNING,
        **job,
    )
    start_reaper(local_ray_pids())
    return True


def use_private_ray_defaults() -> None:
    """Put ``PRIVATE_RAY_ENVIRONMENT`` into this process's environment, where not set."""
    for name, value in PRIVATE_RAY_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def connect_ray(address: str, timeout_s: float, key: str = "runtime.address", **init) -> None:
    """``ray.init(address)``, bounded by ``timeout_s``; ConfigError(``key``) if nobody answers.

    A refused or silent port fails here without Ray ever being asked; a port that accepts
    but is not a Ray head (or one that is wedged) gets Ray's GCS connect timeouts cut to the
    time left, with Ray's retry messages kept off the terminal unless the connect succeeds.
    """
    deadline = time.monotonic() + timeout_s
    hint = "start one with 'ray start --head' or leave runtime.address unset for a local Ray"
    try:
        target = bootstrap_address(address)
        host, port = split_host_port(target)
    except (ConnectionError, ValueError) as error:
        raise ConfigError(key, address, f"{first_line(error)}; {hint}") from None
    tried = target if target == address else f"{target}, Ray's form of {address}"
    if not wait_for_port(host, port, deadline):
        raise ConfigError(
            key,
            address,
            f"no Ray cluster answered within {timeout_s:g} s (tried {tried}); {hint}",
        )
    left = max(1.0, deadline - time.monotonic())
    with captured_stderr() as captured:
        try:
            with bounded_gcs_connect(left):
                ray.init(address=address, logging_level=logging.WARNING, **init)
        except (ConnectionError, TimeoutError) as error:
            captured.discard = True
            raise ConfigError(
                key,
                address,
                f"no Ray cluster answered within {timeout_s:g} s (tried {tried}: the port is "
                f"open, but {first_line(error)}; a Ray head's GCS port is 6379 by default); "
                + hint,
            ) from None


def bootstrap_address(address: str) -> str:
    """The ``host:port`` Ray will dial for ``address`` (``auto``: the running cluster's)."""
    if address.startswith("ray://"):
        return address[len("ray://") :].split("/", 1)[0]
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # a private helper; without it, dial what was given
        return address
    target = canonicalize_bootstrap_address(address)
    if target is None:
        raise ConnectionError("no running Ray cluster found")
    return target


def split_host_port(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); ValueError if there is no port."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host.strip("[]"), int(port)


def wait_for_port(host: str, port: int, deadline: float) -> bool:
    """Whether a TCP connect to ``host:port`` succeeds before ``deadline`` (monotonic)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            with socket.create_connection((host, port), timeout=min(left, 5.0)):
                return True
        except OSError:
            time.sleep(min(PROBE_INTERVAL_S, max(0.0, deadline - time.monotonic())))


@contextlib.contextmanager
def bounded_gcs_connect(timeout_s: float) -> Iterator[None]:
    """Ray's GCS connect retries cut to about ``timeout_s`` for one ``ray.init``.

    One attempt (the port already answered) of two connects and a cluster-id request, each
    a third of the time. Ray reads its C++ settings from the environment when ``ray`` is
    imported, so they are re-read here; after a failure the environment and Ray's settings
    are put back (after a success Ray has re-read them with the cluster's own).
    """
    step = str(max(1, math.floor((timeout_s - 1) / 3)))  # Ray sleeps 1 s after a failure
    bounds = {
        "RAY_gcs_server_port_wait_time_s": "1",  # attempts of ~1 s each, not 20
        "RAY_gcs_rpc_server_connect_timeout_s": step,
        "RAY_py_gcs_connect_timeout_s": step,
    }
    saved = {name: os.environ.get(name) for name in bounds}
    for name, value in bounds.items():
        os.environ.setdefault(name, value)
    reload_ray_settings()
    try:
        yield
    except BaseException:
        restore_environment(saved)
        reload_ray_settings()
        raise
    restore_environment(saved)


def reload_ray_settings() -> None:
    """Make Ray re-read its ``RAY_*`` settings (only while this process is not connected)."""
    try:
        from ray._raylet import Config
    except ImportError:  # private; without it the Python-side retry count still applies
        return
    if not ray.is_initialized():
        Config.initialize("")


def restore_environment(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


class _Captured:
    discard = False


@contextlib.contextmanager
def captured_stderr() -> Iterator[_Captured]:
    """Hold this process's stderr (fd 2: Ray's C++ logs too) in a file for the block; write
    it back afterwards unless the block set ``discard`` (it failed with its own message)."""
    captured = _Captured()
    try:
        sys.stderr.flush()
        saved_fd = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (embedded): nothing to hold
        yield captured
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield captured
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            if not captured.discard:
                held.seek(0)
                text = held.read().decode(errors="replace")
                if text:
                    sys.stderr.write(text)
                    sys.stderr.flush()


def first_line(error: BaseException) -> str:
    """An exception's message, first line only (Ray's span many)."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0].rstrip(".")
