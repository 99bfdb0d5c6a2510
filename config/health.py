"""``/healthz``: is the database, the Celery broker and the channel layer reachable? 200 or 503."""

import asyncio
import time
import uuid

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection
from django.http import JsonResponse

from core.celery import app as celery_app

TIMEOUT_SECONDS = 3


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _broker() -> None:
    with celery_app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=TIMEOUT_SECONDS)


async def _channel_layer_round_trip() -> None:
    layer = get_channel_layer()
    # A plain channel name, not new_channel()'s process-local one: those are
    # buffered per process by some layers, and this check must see the store itself.
    channel = f"healthz.{uuid.uuid4().hex}"
    await layer.send(channel, {"type": "healthz.ping"})
    message = await asyncio.wait_for(layer.receive(channel), TIMEOUT_SECONDS)
    if message.get("type") != "healthz.ping":
        raise RuntimeError(f"unexpected message {message!r}")


def _channel_layer() -> None:
    async_to_sync(_channel_layer_round_trip)()


CHECKS = {"database": _database, "broker": _broker, "channel_layer": _channel_layer}


def healthz(request):
    report, healthy = {}, True
    for name, check in CHECKS.items():
        started = time.monotonic()
        try:
            check()
        except Exception as exc:  # noqa: BLE001 - any failure is the answer here
            healthy = False
            report[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        else:
            report[name] = {"ok": True, "ms": round((time.monotonic() - started) * 1000, 1)}
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "checks": report}, status=200 if healthy else 503
    )
