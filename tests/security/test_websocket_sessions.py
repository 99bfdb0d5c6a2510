"""Websockets close when what opened them ends (issue 16: "websockets keep streaming after logout").

A page's socket closes with 4401 and a sentence to read when its user signs out, and a script's when its API
token is revoked or expires; a session that ends without any signal (expired, deleted behind Django's back) is
caught by the periodic re-check. The web process is real (uvicorn) and so is the client (`websockets`).

The signal receivers (frontend/ws_sessions.py, connected in frontend.apps) are shown on a portal that
re-checks only every hour (``signals_portal``), so that nothing else can close the socket within the deadline;
the re-check on one that re-checks every second (``recheck_portal``).
"""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from django.contrib.sessions.models import Session
from django.utils import timezone

from accounts.models import ApiToken
from accounts.tokens import token_create
from frontend.consumers import UNAUTHENTICATED
from tests.frontend.test_live_jobs import submit
from tests.security.ws_portal import (  # noqa: F401 - fixtures
    first_message,
    handshake_status,
    open_socket,
    recheck_portal,
    session_key,
    sign_out,
    signals_portal,
    wait_closed,
)

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

DEADLINE = 5.0  # seconds from the logout's or revocation's answer to the close (measured: under 0.1 s)


@pytest.fixture
def job_path(world) -> str:
    return f"/ws/jobs/{submit(world.alice).pk}/"


def test_a_page_socket_closes_when_its_user_signs_out(world, signals_portal, job_path):
    portal = signals_portal
    cookie = session_key(world.alice)
    other_cookie = session_key(world.alice)  # alice on another machine stays signed in
    with (
        open_socket(portal, job_path, cookie=cookie) as socket,
        open_socket(portal, "/ws/departments/vision/", cookie=other_cookie) as other,
    ):
        assert first_message(socket) == {"type": "hello"}
        assert first_message(other) == {"type": "hello"}
        assert sign_out(portal, cookie).status_code == 302
        code, reason, seconds = wait_closed(socket, within=DEADLINE)
        assert code == UNAUTHENTICATED
        assert "Sign in again" in reason
        print(f"closed {seconds:.3f} s after the logout answered")
        with pytest.raises(TimeoutError):
            other.recv(timeout=1)  # the other session's socket is still open (and quiet)
    # Signed out means signed out: the old cookie opens nothing any more (refused at the handshake).
    assert handshake_status(portal, job_path, cookie=cookie) == 403


def test_a_script_socket_closes_when_its_token_is_revoked(world, signals_portal, job_path):
    portal = signals_portal
    token, key = token_create(user=world.alice, name="watcher")
    with open_socket(portal, job_path, origin=None, token=key) as socket:
        assert first_message(socket) == {"type": "hello"}
        revoked = httpx.delete(
            f"{portal.url}/api/v1/tokens/{token.pk}/", headers={"Authorization": f"Token {key}"}, timeout=30
        )
        assert revoked.status_code == 204, revoked.text
        code, reason, seconds = wait_closed(socket, within=DEADLINE)
        assert code == UNAUTHENTICATED
        assert "revoked or has expired" in reason
        print(f"closed {seconds:.3f} s after the revocation answered")
    assert handshake_status(portal, job_path, origin=None, token=key) == 403


def test_a_script_socket_closes_when_its_token_expires(world, signals_portal, job_path):
    token, key = token_create(user=world.alice, name="short-lived")
    expires_at = timezone.now() + timedelta(seconds=2)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=expires_at)  # no signal: only the expiry itself
    with open_socket(signals_portal, job_path, origin=None, token=key) as socket:
        assert first_message(socket) == {"type": "hello"}
        code, _, _ = wait_closed(socket, within=DEADLINE)
        assert code == UNAUTHENTICATED
        assert timezone.now() >= expires_at


def test_a_session_that_ends_without_a_signal_is_caught_by_the_recheck(world, recheck_portal, job_path):
    expired, deleted = session_key(world.alice), session_key(world.carol)
    with (
        open_socket(recheck_portal, job_path, cookie=expired) as first,
        open_socket(recheck_portal, job_path, cookie=deleted) as second,
    ):
        assert first_message(first) == first_message(second) == {"type": "hello"}
        # Queryset writes send no signal: as a session simply running out, or rows removed by hand.
        Session.objects.filter(session_key=expired).update(expire_date=timezone.now() - timedelta(seconds=1))
        Session.objects.filter(session_key=deleted)._raw_delete(Session.objects.db)
        assert wait_closed(first, within=DEADLINE)[0] == UNAUTHENTICATED
        assert wait_closed(second, within=DEADLINE)[0] == UNAUTHENTICATED


def test_a_token_header_is_judged_alone_even_with_a_valid_session_cookie(world, signals_portal, job_path):
    """A wrong token never falls back on the cookie the same handshake carries (what lets a token socket
    go without an Origin: frontend/ws_origin.py)."""
    token, key = token_create(user=world.alice, name="gone")
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    cookie = session_key(world.alice)
    assert handshake_status(signals_portal, job_path, cookie=cookie, token=key) == 403
    with open_socket(signals_portal, job_path, cookie=cookie) as socket:
        assert first_message(socket) == {"type": "hello"}
