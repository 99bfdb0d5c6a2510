"""Who opens a websocket: a program with ``Authorization: Token <key>``, or a browser with its session cookie.

Never both: a handshake that carries a token header is judged by that token alone (a wrong, revoked or
expired one is anonymous and closes with 4401), even if cookies come along. That is what lets the
Origin check (frontend/ws_origin.py) accept a token socket without an Origin: no cookie can speak for it.
"""

from __future__ import annotations

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from django.contrib.auth.models import AnonymousUser

from accounts import tokens
from frontend import ws_sessions


class TokenOrSessionAuth:
    """ASGI middleware: sets ``scope["user"]`` and, for a token, ``scope["api_token_id"]``."""

    def __init__(self, inner):
        self.inner = inner
        self.by_session = AuthMiddlewareStack(inner)

    async def __call__(self, scope, receive, send):
        key = ws_sessions.token_key(scope)
        if key is None:
            return await self.by_session(scope, receive, send)
        token = await database_sync_to_async(tokens.token_authenticate)(key)
        scope = dict(scope, user=token.user if token else AnonymousUser(), api_token_id=token.pk if token else None)
        return await self.inner(scope, receive, send)
