"""The virtual clock of the timed round kinds: when clients finish, drop out and report.

- ``virtual.py``: the clock both kinds share (a client's seconds per sample, its dropouts,
  its transfers over its bandwidths);
- ``sync.py``: synchronous rounds on it (who is sampled, who is online, who is kept, the
  round's time);
- ``schedule.py`` / ``staleness.py``: asynchronous rounds on it (the seeded dispatch and
  arrival schedule; an upload's staleness discount);
- ``build.py``: the clock a run's config asks for (speeds, networks, traces, deadlines).

The round kinds that use it (``local.py``, ``buffered.py``) are in ``fedsim/rounds/``.
"""

from fedsim.rounds.clock.virtual import Network, VirtualClock, draw_slowdowns, transfer_seconds

__all__ = ["Network", "VirtualClock", "draw_slowdowns", "transfer_seconds"]
