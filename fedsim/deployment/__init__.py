"""Deployment realism: attacks, clipping, differential privacy, compression, robust rules.

Each option is one stage of the upload pipeline (``stages/``), with a client side the
worker runs on the update (``upload.py``) and a server side the driver runs before
``aggregate`` (``driver.py``). Algorithms declare what they upload
(``Algorithm.model_upload``, asked in one place: ``decision.py``), so no algorithm file
knows about any of them. docs/deployment.md is the user's guide.
"""
