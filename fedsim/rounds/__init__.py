"""The one round loop and the round kinds (local, exchange, buffered).

``loop.py`` does what every run does each round; ``compose.py`` chooses the kind once per run
and refuses the feature pairs that cannot compose; ``local.py``, ``exchange.py`` and
``buffered.py`` are the kinds; ``records.py`` builds a round's record; ``clock/`` is the
virtual clock of the timed kinds (the synchronous rules, the asynchronous schedule and
staleness rules: pure, no torch).
"""
