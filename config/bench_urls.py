"""Mounted at /bench/ only when PORTAL_BENCH=true: bench/api.py's ceiling, the cheapest Django view there is.

It passes through the same middleware as the API (no database, no DRF), so the API's figures read as a
fraction of what this server can do at all. ``pid`` names the process that answered, so that bench.api can
wait until every worker of a multi-process server is up before it opens its keep-alive connections.
"""

import os

from django.http import HttpResponse
from django.urls import path


def bare(request):
    return HttpResponse("ok", content_type="text/plain")


def pid(request):
    return HttpResponse(str(os.getpid()), content_type="text/plain")


urlpatterns = [path("bare", bare, name="bench-bare"), path("pid", pid, name="bench-pid")]
