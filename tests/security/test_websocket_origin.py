"""The websocket Origin check compares scheme, host and port (issue 16: "the websocket Origin check ignores the
port"); frontend/ws_origin.py.

channels' AllowedHostsOriginValidator let any page on an allowed host open a socket with the portal's cookies:
``http://localhost:9999`` (another program on the same machine) or plain http next to an https portal. Through
the real web process a browser-like client (an Origin, a session cookie) is refused unless the Origin is the
portal's own; a script with an API token may send none. The scheme rules (ws -> http, wss -> https) and
CSRF_TRUSTED_ORIGINS are shown on handshake scopes, as the ASGI server hands them over.
"""

from __future__ import annotations

import pytest

from accounts.tokens import token_create
from frontend.ws_origin import origin_allowed
from tests.security.ws_portal import handshake_status, session_key, signals_portal  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

PATH = "/ws/departments/vision/"


def test_only_the_portals_own_origin_opens_a_cookie_socket(world, signals_portal):
    portal = signals_portal
    cookie = session_key(world.alice)
    own = f"http://127.0.0.1:{portal.port}"
    assert handshake_status(portal, PATH, origin=own, cookie=cookie) == 101
    for foreign in (
        f"http://127.0.0.1:{portal.port + 1}",  # same host, another port: what the host-only check let in
        "http://127.0.0.1:9999",
        "http://127.0.0.1",  # port 80
        f"https://127.0.0.1:{portal.port}",  # the scheme differs
        f"http://localhost:{portal.port}",  # an allowed host, but not the one this page came from
        f"http://evil.example:{portal.port}",
        f"http://127.0.0.1.evil.example:{portal.port}",
        "null",  # sandboxed frames, file:// pages
    ):
        assert handshake_status(portal, PATH, origin=foreign, cookie=cookie) == 403, foreign
    # A browser always sends an Origin: a cookie socket without one is refused.
    assert handshake_status(portal, PATH, origin=None, cookie=cookie) == 403


def test_a_token_socket_may_come_without_an_origin_but_not_from_a_foreign_one(world, signals_portal):
    _, key = token_create(user=world.alice, name="watcher")
    assert handshake_status(signals_portal, PATH, origin=None, token=key) == 101
    assert handshake_status(signals_portal, PATH, origin="http://127.0.0.1:9999", token=key) == 403
    # No Origin and no token: refused before anyone looks at the cookie.
    assert handshake_status(signals_portal, PATH, origin=None) == 403


def scope(origin: str | None, host: str = "localhost:8000", scheme: str = "ws", **headers: str) -> dict:
    pairs = [(b"host", host.encode())] + ([(b"origin", origin.encode())] if origin is not None else [])
    pairs += [(name.encode(), value.encode()) for name, value in headers.items()]
    return {"type": "websocket", "scheme": scheme, "headers": pairs}


@pytest.mark.parametrize(
    ("origin", "host", "scheme", "allowed"),
    [
        ("http://localhost:8000", "localhost:8000", "ws", True),
        ("http://localhost:9999", "localhost:8000", "ws", False),
        ("http://LOCALHOST:8000", "localhost:8000", "ws", True),  # host names are case-insensitive
        ("https://localhost:8000", "localhost:8000", "ws", False),  # an https page, a plain socket
        ("http://localhost:8000", "localhost:8000", "wss", False),  # a plain page, a TLS socket
        ("https://localhost", "localhost", "wss", True),
        ("https://localhost:443", "localhost", "wss", True),  # default ports are the same port
        ("http://localhost", "localhost:80", "ws", True),
        ("http://evil.example:8000", "evil.example:8000", "ws", False),  # DNS rebinding: not an allowed host
        ("http://localhost:8000/path", "localhost:8000", "ws", False),  # not an origin
        ("http://user@localhost:8000", "localhost:8000", "ws", False),
        ("null", "localhost:8000", "ws", False),
        ("http://[::1]:8000", "[::1]:8000", "ws", True),
    ],
)
def test_scheme_host_and_port_must_all_match(settings, origin, host, scheme, allowed):
    settings.ALLOWED_HOSTS = ["localhost", "[::1]"]
    assert origin_allowed(scope(origin, host, scheme)) is allowed


def test_trusted_origins_are_accepted_with_their_scheme_and_port(settings):
    settings.ALLOWED_HOSTS = ["portal.internal"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://portal.example.org", "https://*.gpu.example.org:8443"]
    inside = "portal.internal:8000"  # what a TLS proxy in front of the portal forwards as Host
    assert origin_allowed(scope("https://portal.example.org", inside))
    assert not origin_allowed(scope("http://portal.example.org", inside))
    assert not origin_allowed(scope("https://portal.example.org:8443", inside))
    assert origin_allowed(scope("https://lab.gpu.example.org:8443", inside))
    assert not origin_allowed(scope("https://lab.gpu.example.org", inside))
    assert not origin_allowed(scope("https://gpu.example.org.evil.example:8443", inside))


def test_a_handshake_without_a_single_host_or_origin_is_refused(settings):
    settings.ALLOWED_HOSTS = ["localhost"]
    assert not origin_allowed({"type": "websocket", "scheme": "ws", "headers": [(b"origin", b"http://localhost")]})
    two_origins = scope("http://localhost:8000")
    two_origins["headers"].append((b"origin", b"http://localhost:8000"))
    assert not origin_allowed(two_origins)
    assert not origin_allowed(scope(None))
    assert origin_allowed(scope(None, authorization="Token abc"))
    assert not origin_allowed(scope(None, authorization="Basic abc"))
