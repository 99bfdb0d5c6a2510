"""GET /metrics: for a Bearer token (PORTAL_METRICS_TOKEN) or a caller on an allowed network (PORTAL_METRICS_ALLOW)."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder

from config.metrics.collector import PortalCollector

# One registry, prometheus_client's default: django-prometheus's HTTP and database metrics (middleware and
# database backends in settings) are recorded there, beside its process and Python metrics, and the portal's
# collector joins them. Those are per process; the portal's own are read from the database (README "Metrics").
registry = REGISTRY
registry.register(PortalCollector())


@require_GET
def metrics(request):
    refused = _refused(request)
    if refused:
        return refused
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encode(registry), content_type=content_type)


def _refused(request) -> HttpResponse | None:
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        expected = settings.PORTAL_METRICS_TOKEN
        # Constant time: the comparison must not tell how much of a guess was right.
        if expected and hmac.compare_digest(presented.strip().encode(), expected.encode()):
            return None
        response = HttpResponse("Wrong metrics token.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if _allowed_address(request.META.get("REMOTE_ADDR", "")):
        return None
    return HttpResponse(
        "Metrics are served to the networks in PORTAL_METRICS_ALLOW or with PORTAL_METRICS_TOKEN.\n",
        status=403,
        content_type="text/plain",
    )


def _allowed_address(remote: str) -> bool:
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return any(address in network for network in settings.PORTAL_METRICS_ALLOW)
