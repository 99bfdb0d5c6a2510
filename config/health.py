"""Health: ``/healthz`` (everything), ``/healthz/ready`` (what web needs) and ``/healthz/live`` (web itself).

- ``/healthz``: the database, the Celery broker, the channel layer, and the heartbeats of the worker, beat and
  watcher and the age of the last scheduling cycle (core/heartbeats.py); 503 when any fails or is stale. For
  monitoring and for people: ``make run`` and the supervision test watch it.
- ``/healthz/ready``: the database, the broker and the channel layer only, Kubernetes' readiness probe of web:
  a stale worker must not take every web pod out of its Service.
- ``/healthz/live``: answers as long as the web process serves requests (no dependency), web's liveness probe.

Details (check names, ages, error texts) go only to platform admins (signed in) and to callers that may read
``/metrics`` (PORTAL_METRICS_ALLOW or the metrics token); everyone else gets ``{"status": "ok"}`` or
``{"status": "unavailable"}`` with the status code. No answer names the database's host, name or user.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache

from accounts.permissions import is_platform_admin
from config.metrics import views as metrics_views
from core import heartbeats
from core.celery import app as celery_app

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 3

WHAT_IT_IS = {
    heartbeats.WORKER: "The Celery worker",
    heartbeats.BEAT: "Celery beat",
    heartbeats.WATCHER: "The cluster watcher",
    heartbeats.SCHEDULER: "The scheduler service (manage.py run_scheduler)",
}


class Unhealthy(Exception):
    """A check failed; the message is a sentence for an operator, naming no secret."""


def _database() -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        # Drivers name the host, port, database and user in their messages: only the log gets them.
        log.warning("/healthz: the database check failed", exc_info=True)
        raise Unhealthy(
            f"The database does not answer ({type(exc).__name__}); the web process's log has the details."
        ) from exc


def _broker() -> None:
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=TIMEOUT_SECONDS)
    except Exception as exc:
        log.warning("/healthz: the broker check failed", exc_info=True)
        raise Unhealthy(
            f"The Celery broker does not answer ({type(exc).__name__}); check REDIS_URL and that Redis runs."
        ) from exc


async def _channel_layer_round_trip() -> None:
    layer = get_channel_layer()
    # A plain channel name, not new_channel()'s process-local one: those are
    # buffered per process by some layers, and this check must see the store itself.
    channel = f"healthz.{uuid.uuid4().hex}"
    await layer.send(channel, {"type": "healthz.ping"})
    message = await asyncio.wait_for(layer.receive(channel), TIMEOUT_SECONDS)
    if message.get("type") != "healthz.ping":
        raise RuntimeError(f"unexpected message type {message.get('type')!r}")


def _channel_layer() -> None:
    try:
        async_to_sync(_channel_layer_round_trip)()
    except Exception as exc:
        log.warning("/healthz: the channel layer check failed", exc_info=True)
        raise Unhealthy(
            f"The channel layer does not carry messages ({type(exc).__name__}); live pages and websockets stop."
        ) from exc


def _heartbeat_checks() -> dict[str, dict]:
    try:
        ages = heartbeats.ages()
    except Exception as exc:
        log.warning("/healthz: the heartbeats cannot be read", exc_info=True)
        error = f"Heartbeats cannot be read: the database does not answer ({type(exc).__name__})."
        return {name: {"ok": False, "error": error} for name in (*heartbeats.expected(), heartbeats.CYCLE)}
    report = {}
    for name, age in ages.items():
        limit = heartbeats.max_age(name)
        entry: dict = {"ok": age is not None and age <= limit, "age_s": None if age is None else round(age, 1)}
        entry["max_age_s"] = limit
        if name == heartbeats.CYCLE:
            who = (
                "the scheduler service runs them: is a run_scheduler process leading?"
                if settings.PORTAL_SCHEDULER == "service"
                else "is beat sending reconcile-jobs and the worker running it?"
            )
            if age is None:
                entry["error"] = f"No scheduling cycle has run yet: {who}"
            elif not entry["ok"]:
                entry["error"] = f"The last scheduling cycle ran {age:.0f} s ago (more than {limit:.0f} s): {who}"
        elif age is None:
            entry["error"] = f"{WHAT_IT_IS[name]} has never recorded a heartbeat: is it running?"
        elif not entry["ok"]:
            entry["error"] = (
                f"{WHAT_IT_IS[name]} last beat {age:.0f} s ago (more than {limit:.0f} s): it is "
                "frozen, dead or cut off; see its log (make run's supervisord restarts it)."
            )
        report[name] = entry
    return report


READY: dict[str, Callable[[], None]] = {
    "database": _database,
    "broker": _broker,
    "channel_layer": _channel_layer,
}


def _run(checks: dict[str, Callable[[], None]]) -> dict[str, dict]:
    report = {}
    for name, check in checks.items():
        started = time.monotonic()
        try:
            check()
        except Unhealthy as exc:
            report[name] = {"ok": False, "error": str(exc)}
        else:
            report[name] = {"ok": True, "ms": round((time.monotonic() - started) * 1000, 1)}
    return report


def may_see_details(request) -> bool:
    """Platform admins, and whoever /metrics would answer (its allow-list or its token)."""
    if is_platform_admin(getattr(request, "user", None)):
        return True
    return metrics_views._refused(request) is None  # the one place the metrics audience is decided


def _answer(request, report: dict[str, dict]) -> JsonResponse:
    healthy = all(check["ok"] for check in report.values())
    body: dict = {"status": "ok" if healthy else "unavailable"}
    if may_see_details(request):
        body["checks"] = report
    return JsonResponse(body, status=200 if healthy else 503)


@never_cache
def healthz(request):
    return _answer(request, _run(READY) | _heartbeat_checks())


@never_cache
def healthz_ready(request):
    return _answer(request, _run(READY))


@never_cache
def healthz_live(request):
    return JsonResponse({"status": "ok"})
