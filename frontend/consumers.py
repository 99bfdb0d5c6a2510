"""Websocket endpoints. Each closes with 4401 for anonymous callers."""

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from frontend.services import user_group

UNAUTHENTICATED = 4401


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
