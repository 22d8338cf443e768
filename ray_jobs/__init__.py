"""Cluster entry points: `ray job submit -- python -m ray_jobs.run_experiment CONFIG`."""
