"""Websocket endpoints. Each closes with 4401 for anonymous callers and 4404 for what they may not see.

A socket is authenticated by the browser's session cookie or, for programs, by an ``Authorization: Token
<key>`` header (frontend/ws_auth.py), and closes with 4401 (and a reason to read) as soon as that session
ends or that token is revoked or expires: at once when frontend.ws_sessions tells it, and at the latest at
the next periodic re-check (PORTAL_WS_RECHECK_SECONDS) for what no signal announces.
"""

import asyncio
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts import selectors as account_selectors
from frontend import ws_sessions
from jobs import live, selectors

UNAUTHENTICATED = 4401
NOT_FOUND = 4404
SIGNED_OUT = "You were signed out or your session expired. Sign in again to follow live updates."
TOKEN_ENDED = "This API token was revoked or has expired. Connect again with a working token."
ACCESS_ENDED = "You may no longer see this. Ask a department admin if you should."


class _LiveConsumer(AsyncJsonWebsocketConsumer):
    """Joins the group of one object the user may see; relays jobs.live messages as they are.

    Access is looked at again before relaying, at most every RECHECK_SECONDS: a user removed from the
    department stops receiving (the socket closes with 4404) instead of hearing until they reconnect.
    The watchdog task looks again every PORTAL_WS_RECHECK_SECONDS whether anything arrives or not.
    """

    RECHECK_SECONDS = 30.0

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        self.token_id = self.scope.get("api_token_id")
        session = self.scope.get("session")
        self.session_key = None if self.token_id else getattr(session, "session_key", None)
        if not self.token_id and not self.session_key:
            await self.close(code=UNAUTHENTICATED)
            return
        group = await database_sync_to_async(self.group_for)(user)
        if group is None:
            await self.close(code=NOT_FOUND)
            return
        self.group, self.user, self.checked_at = group, user, time.monotonic()
        self.auth_group = (
            ws_sessions.token_group(self.token_id) if self.token_id else ws_sessions.session_group(self.session_key)
        )
        # The ending's group first: a logout from now on is heard; one just before is caught by the first check.
        await self.channel_layer.group_add(self.auth_group, self.channel_name)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "hello"})
        self.watchdog = asyncio.ensure_future(self._watch())

    def group_for(self, user) -> str | None:
        raise NotImplementedError

    def _group_now(self) -> str | None:
        """group_for with the user read again (memberships are cached on the user object)."""
        user = get_user_model().objects.filter(pk=self.user.pk, is_active=True).first()
        return self.group_for(user) if user is not None else None

    def _authentication_holds(self) -> bool:
        if self.token_id:
            return ws_sessions.token_working(self.token_id)
        return ws_sessions.session_user_id(self.session_key) == self.user.pk

    def _seconds_to_next_check(self) -> float:
        seconds = float(settings.PORTAL_WS_RECHECK_SECONDS)
        if self.token_id:
            expires_at = ws_sessions.token_expires_at(self.token_id)
            if expires_at is not None:  # close right when it expires, not up to a period later
                seconds = min(seconds, max(0.0, (expires_at - timezone.now()).total_seconds()) + 0.05)
        return seconds

    async def _watch(self):
        while True:
            await asyncio.sleep(await database_sync_to_async(self._seconds_to_next_check)())
            if not await database_sync_to_async(self._authentication_holds)():
                await self._end(UNAUTHENTICATED, TOKEN_ENDED if self.token_id else SIGNED_OUT)
                return
            if await database_sync_to_async(self._group_now)() != self.group:
                await self._end(NOT_FOUND, ACCESS_ENDED)
                return
            self.checked_at = time.monotonic()

    async def _end(self, code: int, reason: str) -> None:
        await self.close(code=code, reason=reason)

    async def disconnect(self, code):
        watchdog = getattr(self, "watchdog", None)
        if watchdog is not None and watchdog is not asyncio.current_task():
            watchdog.cancel()
        for group in (getattr(self, "group", None), getattr(self, "auth_group", None)):
            if group:
                await self.channel_layer.group_discard(group, self.channel_name)

    async def auth_ended(self, event):
        """frontend.ws_sessions: the session or token this socket was opened with has ended."""
        await self._end(UNAUTHENTICATED, TOKEN_ENDED if self.token_id else SIGNED_OUT)

    async def job_update(self, event):
        if time.monotonic() - self.checked_at >= self.RECHECK_SECONDS:
            if await database_sync_to_async(self._group_now)() != self.group:
                await self.close(code=NOT_FOUND)
                return
            self.checked_at = time.monotonic()
        await self.send_json(event["payload"])


class JobConsumer(_LiveConsumer):
    """``/ws/jobs/<id>/``: status changes and new timeline events of one job."""

    def group_for(self, user):
        job = selectors.job_get(user=user, job_id=self.scope["url_route"]["kwargs"]["job_id"])
        return live.job_group(job.pk) if job else None


class DepartmentConsumer(_LiveConsumer):
    """``/ws/departments/<slug>/``: every job change and queue move of one department, for its members."""

    def group_for(self, user):
        department = account_selectors.department_get(user=user, slug=self.scope["url_route"]["kwargs"]["slug"])
        return live.department_group(department.pk) if department else None
