"""The upload pipeline's stages, one file per deployment option (``base.py``: the seam).

In client order: ``attack`` (attack.*), ``clip`` (privacy.clip_norm), ``compress``
(compression.*), ``noise`` (privacy.mode and its accountant), ``robust``
(aggregation.rule, aggregation.anomaly_cosine). ``fedsim/deployment/driver.py`` builds the
list of the options that are set and runs it.
"""
