"""ASGI entry point (served by uvicorn): Django for HTTP, Channels for websockets, the edge in front of both.

- Proxy headers: ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are applied to the scope (the client's address,
  the scheme) only when the TCP peer is in PORTAL_TRUSTED_PROXIES, by uvicorn's own ProxyHeadersMiddleware
  (the client is the right-most address of the chain that is not a trusted proxy). Django's REMOTE_ADDR and
  ``request.is_secure()``, DRF's throttles, the /metrics allow-list and the login lock-outs all read the scope.
  With no trusted proxy (the default) the headers are ignored.
- Request bodies are capped before any other work (config/edge.py, PORTAL_MAX_REQUEST_BYTES).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402 - needs the apps loaded above
from django.conf import settings  # noqa: E402
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware  # noqa: E402

from config.edge import BodyLimit  # noqa: E402
from frontend.routing import websocket_application  # noqa: E402
from serving.router import asgi_fast_path  # noqa: E402

portal = ProtocolTypeRouter(
    {
        # Token-authenticated calls to /serve/ skip Django's middleware (a thread hop per hook, ~5 ms a
        # request): serving.router answers them itself; everything else is Django's. Both behind the body cap.
        "http": BodyLimit(
            asgi_fast_path(django_asgi_app),
            max_bytes=settings.PORTAL_MAX_REQUEST_BYTES,
            serve_max_bytes=settings.PORTAL_SERVE_MAX_REQUEST_BYTES,
        ),
        # Origin checked with scheme, host and port; a session or an API token; closed when either ends.
        "websocket": websocket_application(),
    }
)


def behind_trusted_proxies(app, networks):
    """``app`` reading the proxy headers of peers in ``networks`` (ip_network objects); ``app`` itself if none."""
    if not networks:
        return app
    return ProxyHeadersMiddleware(app, trusted_hosts=[str(network) for network in networks])


application = behind_trusted_proxies(portal, settings.PORTAL_TRUSTED_PROXIES)
