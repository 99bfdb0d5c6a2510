"""The websocket Origin check: the page that opens a socket must be the portal's own, scheme and port included.

channels' AllowedHostsOriginValidator compares only the host with ALLOWED_HOSTS, so a page on
``http://localhost:9999`` (another program on the same machine) or plain ``http://`` next to an
``https://`` portal could open sockets that the browser sends the portal's cookies with. Here an Origin
is accepted only when its scheme, host and port equal the handshake's own (the Host header, which must be
one of ALLOWED_HOSTS, and ``ws`` -> ``http``, ``wss`` -> ``https``), or one of CSRF_TRUSTED_ORIGINS (the
public address behind a TLS proxy, for instance).

A missing or ``null`` Origin is refused too, except for a handshake that authenticates with an
``Authorization: Token`` header (frontend/ws_auth.py): browsers always send an Origin and cannot set that
header, so such a socket comes from a program, and its token, not an ambient cookie, is what lets it in.
Cross-site websocket hijacking needs a browser's cookies; a token socket carries none that count.
A refused handshake is denied (HTTP 403), as channels' own validator does.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

from frontend import ws_sessions

DEFAULT_PORTS = {"http": 80, "https": 443}
PAGE_SCHEME = {"ws": "http", "wss": "https"}


def _origin(value: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an origin such as ``https://portal.example.org``, or None if it is not one."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.username or parts.password:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    return parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme]


def _allowed_hosts() -> list[str]:
    hosts = settings.ALLOWED_HOSTS
    if settings.DEBUG and not hosts:  # Django's own rule for an empty list while debugging
        return [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def own_origin(scope) -> tuple[str, str, int] | None:
    """The origin of the portal as this handshake reached it, or None (no Host, or one not allowed)."""
    hosts = [value for name, value in scope.get("headers", ()) if name == b"host"]
    scheme = PAGE_SCHEME.get(scope.get("scheme", "ws"))
    if len(hosts) != 1 or scheme is None:
        return None
    host = hosts[0].decode("latin-1").strip()
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return None
    return _origin(f"{scheme}://{host}")


def _trusted(origin: tuple[str, str, int]) -> bool:
    scheme, host, port = origin
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        parts = urlsplit(trusted)
        if parts.scheme != scheme:
            continue
        if "*" in parts.netloc:  # https://*.example.org, as Django's CSRF check reads it
            pattern = parts.netloc.lstrip("*")
            netloc = host if port == DEFAULT_PORTS[scheme] else f"{host}:{port}"
            if is_same_domain(netloc, pattern) or is_same_domain(f"{host}:{port}", pattern):
                return True
        elif _origin(trusted) == origin:
            return True
    return False


def origin_allowed(scope) -> bool:
    values = [value for name, value in scope.get("headers", ()) if name == b"origin"]
    if len(values) > 1:
        return False
    if not values:
        return ws_sessions.token_key(scope) is not None
    origin = _origin(values[0].decode("latin-1").strip())  # "null" is no origin: refused
    if origin is None:
        return False
    return origin == own_origin(scope) or _trusted(origin)


class OriginValidator:
    """ASGI middleware in front of the websocket application: denies handshakes from foreign pages."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
