"""Prometheus metrics at /metrics (README "Metrics").

Everything is read from the database at scrape time (selectors.py) by one custom collector
(collector.py), so every web process answers the same figures however many web and worker
processes there are: there are no per-process counters. views.py guards the endpoint.
"""
