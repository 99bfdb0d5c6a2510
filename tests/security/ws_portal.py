"""A real web process (tests/processes.py: uvicorn, as `make run`) and the `websockets` client, for the websocket
security tests (test_websocket_*.py): who may open a socket, and when it is closed.

The sessions and tokens are made in the test's database, which the web process reads; logouts and revocations
go through the web process's own HTTP endpoints, as a browser's or a script's would.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest
from django.conf import settings
from django.test import Client
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

from tests.processes import Processes

SESSION = settings.SESSION_COOKIE_NAME


@dataclass
class Portal:
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ws(self, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}{path}"


@contextmanager
def running_portal(tmp_path, **env: str) -> Iterator[Portal]:
    """The web process alone (no worker: nothing here runs jobs) with ``env`` on top of the test settings."""
    processes = Processes(tmp_path)
    try:
        processes.migrate_channel_layer()
        yield Portal(processes.web(env=env))
    finally:
        processes.stop()


@pytest.fixture(scope="module")
def signals_portal(django_db_setup, tmp_path_factory) -> Iterator[Portal]:
    """Re-checks only every hour: whatever closes a socket within a test's deadline is the signals' doing."""
    with running_portal(tmp_path_factory.mktemp("signals-portal"), PORTAL_WS_RECHECK_SECONDS="3600") as portal:
        yield portal


@pytest.fixture(scope="module")
def recheck_portal(django_db_setup, tmp_path_factory) -> Iterator[Portal]:
    """Re-checks every second: what no signal announces is caught within a test's deadline."""
    with running_portal(tmp_path_factory.mktemp("recheck-portal"), PORTAL_WS_RECHECK_SECONDS="1") as portal:
        yield portal


def session_key(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[SESSION].value


def open_socket(
    portal: Portal, path: str, *, origin: str | None = "own", cookie: str | None = None, token: str | None = None
) -> ClientConnection:
    """A socket opened as a browser page would (the portal's own Origin, a session cookie) or a script (a token)."""
    headers = {}
    if cookie:
        headers["Cookie"] = f"{SESSION}={cookie}"
    if token:
        headers["Authorization"] = f"Token {token}"
    if origin == "own":
        origin = portal.url
    return connect(
        portal.ws(path), origin=Origin(origin) if origin else None, additional_headers=headers, open_timeout=10
    )


def handshake_status(portal: Portal, path: str, **kwargs) -> int:
    """101 when the handshake is accepted (the socket is closed again at once), else the HTTP status."""
    try:
        with open_socket(portal, path, **kwargs):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


def first_message(socket: ClientConnection) -> dict:
    return json.loads(socket.recv(timeout=10))


def wait_closed(socket: ClientConnection, *, within: float) -> tuple[int, str, float]:
    """The close code and reason the server sent, and how long it took; AssertionError past ``within`` seconds."""
    started = time.monotonic()
    deadline = started + within
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"the socket was still open {within} s later")
        try:
            socket.recv(timeout=left)  # live updates may arrive meanwhile; only the close counts
        except TimeoutError:
            continue
        except ConnectionClosed as closed:
            assert closed.rcvd is not None, f"the connection dropped without a close frame: {closed!r}"
            return closed.rcvd.code, closed.rcvd.reason, time.monotonic() - started


def sign_out(portal: Portal, cookie: str) -> httpx.Response:
    """The Sign out button: POST /logout/ with the page's CSRF token."""
    with httpx.Client(base_url=portal.url, cookies={SESSION: cookie}, timeout=30) as client:
        page = client.get("/")
        assert page.status_code == 200, page.text[:300]
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert csrf, "the page has no CSRF token to sign out with"
        return client.post("/logout/", data={"csrfmiddlewaretoken": csrf.group(1)})
