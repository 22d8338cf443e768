"""Deployment realism: attacks, clipping, differential privacy, compression, robust rules.

Algorithms declare what they upload (``Algorithm.model_upload``); the worker runs the client
stages on it (``client_stages.py``) and the driver the server stages (``server_stages.py``),
so no algorithm file knows about any of them. docs/deployment.md is the user's guide.
"""
