"""What a websocket was opened with (a browser session or an API token) and telling its sockets when it ends.

Every live socket joins one channel-layer group for what authenticated it: ``ws-session.<digest>`` (a
SHA-256 digest of the session key: the key itself never travels through the channel layer) or
``ws-token.<id>``. The receivers below send ``auth.ended`` to that group when the session ends (logout,
the session row deleted or flushed) or the token is revoked, deleted or saved already expired; the
consumers close with 4401 when they hear it. Pushing is best effort, as in jobs.live: a message that
is lost, and an ending no signal announces (a session that simply expires, a token's expiry time
passing, a deactivated user), is caught by the consumers' periodic re-check, which asks the
functions here whether the session or token still holds.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime
from importlib import import_module
from types import SimpleNamespace

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib import auth
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import ApiToken

log = logging.getLogger(__name__)

MESSAGE_TYPE = "auth.ended"  # handled by the consumers' auth_ended()
TOKEN_KEYWORD = "token"  # Authorization: Token <key>, as the REST API (accounts.authentication)


def session_group(session_key: str) -> str:
    return "ws-session." + hashlib.sha256(session_key.encode()).hexdigest()[:48]


def token_group(token_id: int) -> str:
    return f"ws-token.{token_id}"


def token_key(scope) -> str | None:
    """The key of an ``Authorization: Token <key>`` header of a websocket handshake, or None.

    Browsers cannot set headers on a websocket, so a socket that carries one was opened by a program.
    """
    values = [value for name, value in scope.get("headers", ()) if name == b"authorization"]
    if len(values) != 1:
        return None
    keyword, _, key = values[0].decode("latin-1").strip().partition(" ")
    key = key.strip()
    return key if keyword.lower() == TOKEN_KEYWORD and key else None


# --- is it still valid? (the consumers' periodic re-check) ---------------------------------------------


def session_user_id(session_key: str) -> int | None:
    """The id of the user the session is signed in as now, or None: expired, flushed, deleted, password
    changed since (Django's session hash), or the user deactivated. Reads the store again every time."""
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = auth.get_user(SimpleNamespace(session=store))  # type: ignore[arg-type]  # it reads .session only
    return user.pk if user.is_authenticated else None


def token_working(token_id: int, *, now: datetime | None = None) -> bool:
    """The token is neither revoked nor expired and its user is active."""
    now = now or timezone.now()
    return (
        ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True, user__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .exists()
    )


def token_expires_at(token_id: int) -> datetime | None:
    return ApiToken.objects.filter(pk=token_id).values_list("expires_at", flat=True).first()


# --- telling the sockets -----------------------------------------------------------------------------------


def _send(group: str) -> None:
    def send():
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(group, {"type": MESSAGE_TYPE})
        except Exception:  # best effort: the consumers' re-check closes the sockets anyway
            log.warning("could not tell the websockets of %s that it ended", group.split(".")[0], exc_info=True)

    transaction.on_commit(send)


def session_ended(session_key: str | None) -> None:
    if session_key:
        _send(session_group(session_key))


def token_ended(token_id: int | None) -> None:
    if token_id:
        _send(token_group(token_id))


# --- signal receivers (connected in frontend.apps) ---------------------------------------------------------


def on_user_logged_out(sender, request=None, user=None, **kwargs) -> None:
    # Sent before the session is flushed, so its key is still there.
    session = getattr(request, "session", None)
    session_ended(getattr(session, "session_key", None))


def on_session_deleted(sender, instance, **kwargs) -> None:
    # The database backend: flush() on logout, clearsessions, an admin deleting rows.
    session_ended(instance.session_key)


def on_token_saved(sender, instance, **kwargs) -> None:
    if instance.revoked_at is not None or (instance.expires_at is not None and instance.expires_at <= timezone.now()):
        token_ended(instance.pk)


def on_token_deleted(sender, instance, **kwargs) -> None:
    token_ended(instance.pk)
