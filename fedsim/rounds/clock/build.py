"""The ``system`` section resolved into the run's clock: devices, networks, availability.

``compute_clock`` gives every client its seconds per sample (``system.time_per_sample`` x a
slowdown drawn from ``system.speeds``, or its device trace entry) and the dropout draws;
``network`` its bandwidths; ``availability`` who is online when; ``sync_clock`` puts them
together for synchronous rounds. ``check_system`` refuses, in one line, what a round kind
cannot honour. Traces are read by ``fedsim/system/traces.py`` and mapped onto the clients
by a seeded draw (``trace_mapping``: partition.json records it).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from fedsim.client_work import LocalWork
from fedsim.config import ExperimentConfig
from fedsim.deployment.checks import check_rule
from fedsim.errors import ConfigError, show_value
from fedsim.rounds.clock.sync import (
    AlwaysOnline,
    Availability,
    OnlineByChance,
    OnlineByTrace,
    Rules,
    SyncClock,
)
from fedsim.rounds.clock.virtual import Network, VirtualClock, draw_slowdowns, transfer_seconds
from fedsim.run_plan import RunPlan
from fedsim.streams import NETWORK_TAG, SPEED_TAG
from fedsim.system.traces import (
    AVAILABILITY_TRACE,
    DEVICE_TRACE,
    map_clients,
    read_availability_trace,
    read_device_trace,
)


@functools.lru_cache(maxsize=8)
def _mapped(kind: int, path: str, num_clients: int, seed: int) -> tuple[Any, np.ndarray]:
    """(the trace read from ``path``, the entry of each client) for a device (``kind`` 1)
    or availability (2) trace; read once per run however often it is asked for."""
    if kind == DEVICE_TRACE:
        key, trace = "system.device_trace", read_device_trace(path, "system.device_trace")
        entries = len(trace.seconds_per_sample)
    else:
        key = "system.availability_trace"
        trace = read_availability_trace(path, key)
        entries = len(trace.intervals)
    return trace, map_clients(num_clients, entries, seed, kind, key, path)


def device_profiles(cfg: ExperimentConfig, num_clients: int) -> Any:
    """The device trace's entries mapped onto the clients (None: no trace)."""
    path = cfg.system.device_trace
    if path is None:
        return None
    trace, entries = _mapped(DEVICE_TRACE, path, num_clients, cfg.seed)
    return trace.pick(entries)


def availability_trace(cfg: ExperimentConfig, num_clients: int) -> Any:
    """The availability trace's entries mapped onto the clients (None: no trace)."""
    path = cfg.system.availability_trace
    if path is None:
        return None
    trace, entries = _mapped(AVAILABILITY_TRACE, path, num_clients, cfg.seed)
    picked = trace.pick(entries)
    if all(np.isinf(picked.next_online(c, 0.0)) for c in range(num_clients)):
        key = "system.availability_trace"
        raise ConfigError(key, path, "leaves no client online at any time: nobody to sample")
    return picked


def trace_mapping(cfg: ExperimentConfig, num_clients: int) -> dict[str, Any]:
    """partition.json's ``system``: each trace's path and the entry each client took."""
    out: dict[str, Any] = {}
    for kind, key in ((DEVICE_TRACE, "device_trace"), (AVAILABILITY_TRACE, "availability_trace")):
        path = getattr(cfg.system, key)
        if path is not None:
            entries = _mapped(kind, path, num_clients, cfg.seed)[1]
            out[key] = {"path": path, "entries": [int(e) for e in entries]}
    return out


def compute_clock(
    cfg: ExperimentConfig, train_sizes: np.ndarray, local: LocalWork
) -> tuple[VirtualClock, np.ndarray]:
    """The clients' seconds per sample and dropout draws, and each client's round of
    training in virtual seconds (its samples x its own local epochs x seconds per sample)."""
    s, n = cfg.system, len(train_sizes)
    seed = (cfg.seed, SPEED_TAG)
    profiles = device_profiles(cfg, n)
    if profiles is not None:
        per_sample = np.asarray(profiles.seconds_per_sample, dtype=np.float64)
    else:
        per_sample = draw_slowdowns(s.speeds or "constant", n, seed)
        if s.time_per_sample != 1.0:
            per_sample = per_sample * s.time_per_sample
    clock = VirtualClock(per_sample, s.dropout, seed)
    work = local.all_samples(train_sizes)  # epochs or steps, accumulation: one formula
    durations = clock.durations(range(n), work)
    if not (np.all(np.isfinite(durations)) and np.all(durations > 0)):
        key, value = (
            ("system.device_trace", s.device_trace)
            if profiles is not None
            else ("system.speeds", s.speeds)
        )
        raise ConfigError(
            key, value, "gives some client a round time that is not a finite positive number"
        )
    return clock, durations


def network(cfg: ExperimentConfig, num_clients: int) -> Network:
    """Each client's upload / download bandwidth (bytes/s; inf where the key is null)."""
    s = cfg.system
    profiles = device_profiles(cfg, num_clients)
    if profiles is not None:
        return Network(
            np.asarray(profiles.upload_bps, dtype=np.float64),
            np.asarray(profiles.download_bps, dtype=np.float64),
        )
    slow = draw_slowdowns(
        s.network_speeds or "constant", num_clients, (cfg.seed, SPEED_TAG, NETWORK_TAG)
    )
    up = np.inf if s.upload_bandwidth is None else s.upload_bandwidth
    down = np.inf if s.download_bandwidth is None else s.download_bandwidth
    return Network(up / slow, down / slow)


def transfer_times(cfg: ExperimentConfig, model_bytes: np.ndarray) -> np.ndarray:
    """Seconds each client spends downloading ``model_bytes`` and uploading as many back (an
    asynchronous round's transfers, timed before training; 0 without bandwidths)."""
    net = network(cfg, len(model_bytes))
    sizes = np.asarray(model_bytes, dtype=np.float64)
    return transfer_seconds(sizes, net.download) + transfer_seconds(sizes, net.upload)


def availability(cfg: ExperimentConfig, num_clients: int) -> Availability:
    """Who is online when: always, by chance each attempt, or by the trace."""
    s = cfg.system
    trace = availability_trace(cfg, num_clients)
    if trace is not None:
        return OnlineByTrace(trace)
    if s.availability < 1:
        return OnlineByChance(num_clients, s.availability, cfg.seed)
    return AlwaysOnline(num_clients)


def sync_clock(cfg: ExperimentConfig, plan: RunPlan, train_sizes: np.ndarray) -> SyncClock:
    """The virtual clock of a synchronous run (``system.*``; see sync.py)."""
    s, n = cfg.system, len(train_sizes)
    clock, compute = compute_clock(cfg, train_sizes, plan.client.local)
    rules = Rules(plan.cohort_size, s.overcommit, s.deadline, s.min_clients, s.short_round)
    check_rules(cfg, rules, compute)
    return SyncClock(clock, compute, network(cfg, n), availability(cfg, n), rules, cfg.seed)


def check_rules(cfg: ExperimentConfig, rules: Rules, compute: np.ndarray) -> None:
    """A minimum no round can reach, or a deadline no client can meet: one line."""
    s = cfg.system
    if s.min_clients > rules.cohort_size:
        raise ConfigError(
            "system.min_clients",
            s.min_clients,
            f"at most the {rules.cohort_size} clients a round keeps (join_ratio={cfg.join_ratio}"
            " x the clients)",
        )
    fastest = float(np.min(compute))
    if s.deadline is not None and s.deadline < fastest:
        raise ConfigError(
            "system.deadline",
            s.deadline,
            f"no client can meet it: the fastest needs {fastest:g} virtual seconds to train "
            "(before any transfer)",
        )


GATES = "system.availability, system.dropout, system.overcommit or system.deadline"


def gate_setting(s: Any) -> str:
    """The first ``system`` setting that lets a round keep fewer clients than it samples."""
    for key, on in (
        ("availability", s.availability < 1),
        ("availability_trace", s.availability_trace is not None),
        ("dropout", s.dropout > 0),
        ("overcommit", s.overcommit > 1),
        ("deadline", s.deadline is not None),
    ):
        if on:
            return f"system.{key}={show_value(getattr(s, key))}"
    return "none of system.*"


def check_system(cfg: ExperimentConfig, kind: str) -> None:
    """ConfigError for a ``system`` key the round kind cannot honour (one line)."""
    s, default = cfg.system, type(cfg.system)()
    set_keys = [k for k in vars(default) if getattr(s, k) != getattr(default, k)]
    if kind == "exchange" and set_keys:
        key = set_keys[0]
        raise ConfigError(
            f"system.{key}",
            getattr(s, key),
            f"algorithm.name={cfg.algorithm.name} trains by gradient exchanges, which the "
            "virtual clock does not time (it times one upload per client a round); leave it unset",
        )
    if kind == "buffered":  # overcommit, deadline, min_clients: refused as effects
        if cfg.compression.kind != "none" and s.times_network:
            raise ConfigError(
                "compression.kind",
                cfg.compression.kind,
                "with asynchronous.enabled=true and system bandwidths (or a device trace): an "
                "asynchronous schedule is fixed before training, so it times a full model each "
                "way, not a compressed upload; set compression.kind=none or leave them unset",
            )
    if kind == "local" and s.gates_clients:
        p = cfg.privacy
        if p.mode == "central":
            raise ConfigError(
                "privacy.mode",
                "central",
                "its accountant assumes a uniform sample of join_ratio, and "
                f"{GATES} make who reports depend on the clients",
            )
        if cfg.aggregation.needs_individual:  # a robust rule must run on the fewest kept
            check_rule(
                cfg.aggregation, s.min_clients,
                f"system.min_clients={s.min_clients}: with {gate_setting(s)} a round may keep "
                "that few",
            )  # fmt: skip
        if cfg.eval.when == "after_training":
            raise ConfigError(
                "eval.when",
                "after_training",
                f"with {GATES} a client may train a model that is then discarded; evaluate at "
                "the round's start",
            )
