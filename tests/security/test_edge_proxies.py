"""X-Forwarded-For and X-Forwarded-Proto are believed only from PORTAL_TRUSTED_PROXIES (config/asgi.py, uvicorn's
ProxyHeadersMiddleware): the anonymous throttle and the /metrics allow-list see the real client, in the real
web process; and how the middleware picks the client out of a chain of proxies, on the ASGI scope itself."""

from __future__ import annotations

import asyncio
import ipaddress

import httpx
import pytest
from django.core.cache import cache

from config.asgi import behind_trusted_proxies
from tests.processes import Processes

ALLOWED = "10.9.0.5"  # in PORTAL_METRICS_ALLOW below; the tests' own client (127.0.0.1) is not
SETTINGS = {"PORTAL_THROTTLE_ANON": "5/minute", "PORTAL_METRICS_ALLOW": "10.9.0.0/16"}


@pytest.fixture(scope="module")
def portals(django_db_setup, tmp_path_factory):
    """Two web processes: one with no trusted proxy (the default), one trusting its loopback client."""
    processes = Processes(tmp_path_factory.mktemp("edge-proxies"))
    try:
        untrusted = processes.web(SETTINGS)
        trusted = processes.web(SETTINGS | {"PORTAL_TRUSTED_PROXIES": "127.0.0.1/32"})
        yield f"http://127.0.0.1:{untrusted}", f"http://127.0.0.1:{trusted}"
    finally:
        processes.stop()
        print(processes.logs()[-5000:])


def throttled_after(base: str, addresses: list[str | None]) -> list[int]:
    """The status of GET /api/v1/auth/token/ (anonymous, throttled, then 405) for each X-Forwarded-For."""
    with httpx.Client(base_url=base) as client:
        return [
            client.get("/api/v1/auth/token/", headers={"X-Forwarded-For": a} if a else {}).status_code
            for a in addresses
        ]


def test_rotating_x_forwarded_for_does_not_reset_the_anonymous_throttle(portals):
    untrusted, _ = portals
    cache.clear()  # with REDIS_URL the processes count in the tests' cache
    statuses = throttled_after(untrusted, [f"198.51.100.{n}" for n in range(7)])
    assert statuses == [405] * 5 + [429] * 2


def test_a_forwarded_allowed_address_from_an_untrusted_peer_does_not_pass_the_metrics_allow_list(portals):
    untrusted, _ = portals
    response = httpx.get(f"{untrusted}/metrics", headers={"X-Forwarded-For": ALLOWED})
    assert response.status_code == 403
    assert "PORTAL_METRICS_ALLOW" in response.text


def test_behind_a_trusted_proxy_the_forwarded_address_is_the_client(portals):
    _, trusted = portals
    assert httpx.get(f"{trusted}/metrics", headers={"X-Forwarded-For": ALLOWED}).status_code == 200
    assert httpx.get(f"{trusted}/metrics").status_code == 403  # the proxy itself is not on the allow-list
    # A client's own "X-Forwarded-For: 10.9.0.5" forwarded by the proxy: the proxy appends the real peer.
    spoofed = httpx.get(f"{trusted}/metrics", headers={"X-Forwarded-For": f"{ALLOWED}, 203.0.113.7"})
    assert spoofed.status_code == 403
    cache.clear()
    statuses = throttled_after(trusted, ["203.0.113.50"] * 6 + ["203.0.113.51"])
    assert statuses == [405] * 5 + [429, 405]  # each forwarded client has its own count


@pytest.mark.django_db(transaction=True)
def test_the_scheme_is_the_forwarded_one_only_behind_a_trusted_proxy(portals, world):
    untrusted, trusted = portals
    token = world.api(world.admin)._credentials["HTTP_AUTHORIZATION"]
    auth = {"Authorization": token, "X-Forwarded-Proto": "https"}
    page = "/api/v1/departments/?page_size=1"
    assert httpx.get(trusted + page, headers=auth).json()["next"].startswith("https://127.0.0.1:")
    assert httpx.get(untrusted + page, headers=auth).json()["next"].startswith("http://127.0.0.1:")


# --- The middleware on the ASGI scope ----------------------------------------------------------------


def seen(networks: list[str], peer: str, headers: dict[str, str], kind: str = "http") -> dict:
    """The scope the portal would see for a request from ``peer`` with ``headers``."""
    captured = {}

    async def app(scope, receive, send):
        captured.update(scope)

    wrapped = behind_trusted_proxies(app, [ipaddress.ip_network(n) for n in networks])
    scope = {
        "type": kind,
        "scheme": "ws" if kind == "websocket" else "http",
        "client": (peer, 5000),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    asyncio.run(wrapped(scope, None, None))
    return captured


def test_the_client_is_the_right_most_address_that_is_not_a_trusted_proxy():
    proxies = ["10.0.0.0/8", "fd00::/8"]
    chain = {"X-Forwarded-For": "198.51.100.1, 203.0.113.9, 10.1.2.3"}
    assert seen(proxies, "10.0.0.2", chain)["client"] == ("203.0.113.9", 0)
    assert seen(proxies, "fd00::1", {"X-Forwarded-For": "2001:db8::7"})["client"] == ("2001:db8::7", 0)
    # Every hop trusted: the left-most is the client.
    assert seen(proxies, "10.0.0.2", {"X-Forwarded-For": "10.3.0.1, 10.1.2.3"})["client"][0] == "10.3.0.1"


def test_headers_from_a_peer_outside_the_networks_are_ignored():
    spoof = {"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "https"}
    scope = seen(["10.0.0.0/8"], "192.0.2.44", spoof)
    assert scope["client"] == ("192.0.2.44", 5000) and scope["scheme"] == "http"
    assert seen([], "192.0.2.44", spoof)["client"] == ("192.0.2.44", 5000)  # no trusted proxy: the default


def test_the_forwarded_scheme_applies_to_websockets_too():
    scope = seen(["127.0.0.1/32"], "127.0.0.1", {"X-Forwarded-Proto": "https"}, kind="websocket")
    assert scope["scheme"] == "wss"
