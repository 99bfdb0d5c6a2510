"""Pushing live updates to browsers over the channel layer (works from any process)."""

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def notify_user(*, user_id: int, payload: dict) -> None:
    """Deliver ``payload`` to every open websocket of the user (``/ws/notifications/``)."""
    async_to_sync(get_channel_layer().group_send)(user_group(user_id), {"type": "notify", "payload": payload})
