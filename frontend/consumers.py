"""Websocket endpoints. Each closes with 4401 for anonymous callers and 4404 for what they may not see."""

import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model

from accounts import selectors as account_selectors
from jobs import live, selectors

UNAUTHENTICATED = 4401
NOT_FOUND = 4404


class _LiveConsumer(AsyncJsonWebsocketConsumer):
    """Joins the group of one object the user may see; relays jobs.live messages as they are.

    Access is looked at again before relaying, at most every RECHECK_SECONDS: a user removed from the
    department stops receiving (the socket closes with 4404) instead of hearing until they reconnect.
    """

    RECHECK_SECONDS = 30.0

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        group = await database_sync_to_async(self.group_for)(user)
        if group is None:
            await self.close(code=NOT_FOUND)
            return
        self.group, self.user, self.checked_at = group, user, time.monotonic()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "hello"})

    def group_for(self, user) -> str | None:
        raise NotImplementedError

    def _group_now(self) -> str | None:
        """group_for with the user read again (memberships are cached on the user object)."""
        user = get_user_model().objects.filter(pk=self.user.pk, is_active=True).first()
        return self.group_for(user) if user is not None else None

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

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
