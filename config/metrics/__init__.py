"""Prometheus metrics at /metrics (README "Metrics").

The portal's own figures (``portal_*``) are read from the database at scrape time (selectors.py) by one
custom collector (collector.py), so every web process answers the same ones however many web and worker
processes there are. Beside them, on the same registry, django-prometheus's HTTP and database metrics
(``django_http_*``, ``django_db_*``) and prometheus_client's ``process_*`` and ``python_*`` ones: those are
counted in the process that serves the scrape. views.py guards the endpoint.
"""
