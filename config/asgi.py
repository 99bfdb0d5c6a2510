"""ASGI entry point: Django for HTTP, Channels for websockets (served by daphne)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs the apps loaded above
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from frontend.routing import websocket_urlpatterns  # noqa: E402
from serving.router import asgi_fast_path  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Token-authenticated calls to /serve/ skip Django's middleware (a thread hop per hook, ~5 ms a
        # request): serving.router answers them itself; everything else is Django's.
        "http": asgi_fast_path(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
