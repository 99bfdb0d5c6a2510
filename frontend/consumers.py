"""Websocket endpoints. Each closes with 4401 for anonymous callers and 4404 for what they may not see."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from frontend.services import user_group
from jobs import live, selectors
from quotas import selectors as quota_selectors

UNAUTHENTICATED = 4401
NOT_FOUND = 4404


class NotificationConsumer(AsyncJsonWebsocketConsumer):
    """The signed-in user's own notifications, sent by any process through the channel layer."""

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        self.group = user_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "hello", "username": user.username})

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def notify(self, event):
        await self.send_json({"type": "notify", "payload": event["payload"]})


class _LiveConsumer(AsyncJsonWebsocketConsumer):
    """Joins the group of one object the user may see; relays jobs.live messages as they are."""

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        group = await database_sync_to_async(self.group_for)(user)
        if group is None:
            await self.close(code=NOT_FOUND)
            return
        self.group = group
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "hello"})

    def group_for(self, user) -> str | None:
        raise NotImplementedError

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def job_update(self, event):
        await self.send_json(event["payload"])


class JobConsumer(_LiveConsumer):
    """``/ws/jobs/<id>/``: status changes and new timeline events of one job."""

    def group_for(self, user):
        job = selectors.job_get(user=user, job_id=self.scope["url_route"]["kwargs"]["job_id"])
        return live.job_group(job.pk) if job else None


class DepartmentConsumer(_LiveConsumer):
    """``/ws/departments/<slug>/``: every job change and queue move of one department, for its members."""

    def group_for(self, user):
        department = quota_selectors.department_get(user=user, slug=self.scope["url_route"]["kwargs"]["slug"])
        return live.department_group(department.pk) if department else None
