"""Benchmarks: run as `python -m bench.<name>`; each prints its figures and its baseline."""
