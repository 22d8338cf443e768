"""Executors (in-process, Ray worker pool) and the client worker."""
