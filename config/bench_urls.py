"""Mounted at /bench/ only when PORTAL_BENCH=true: bench/api.py's ceiling, the cheapest Django view there is.

It passes through the same middleware as the API (no database, no DRF), so the API's figures read as a
fraction of what this server can do at all.
"""

from django.http import HttpResponse
from django.urls import path


def bare(request):
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [path("bare", bare, name="bench-bare")]
