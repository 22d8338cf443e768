"""Executors (in-process, Ray worker pool), the client worker and the client state store."""
