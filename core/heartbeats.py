"""Heartbeats: each long-running process proves, from inside itself, that it still works.

- ``worker``: a step of the Celery worker's consumer (``WorkerHeartbeat``, registered in core/celery.py)
  beats on the consumer's own timer while the consumer runs: a frozen (SIGSTOP) or dead worker, or one
  whose consumer lost the broker and is reconnecting, stops beating.
- ``beat``: Celery beat's scheduler (``BeatScheduler``, ``CELERY_BEAT_SCHEDULER``) beats from its tick.
- ``watcher``: ``manage.py watch_clusters`` beats from its main loop while every watch thread lives.
- ``scheduler``: the scheduler service (``manage.py run_scheduler``, leader or standby) beats from its loop; it is
  expected only with PORTAL_SCHEDULER=service (``expected``).
- ``scheduling-cycle``: ``jobs.admission.scheduling_cycle`` records each cycle in its own transaction.

Rows live in the database (``core.models.Heartbeat``), one per name and host, so that every process sees them
on SQLite and on PostgreSQL, with or without Redis. ``/healthz`` (config/health.py) reads the freshest row of
each name; ``manage.py heartbeat --check NAME`` (a Kubernetes liveness probe) reads its own host's row.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import datetime

from celery import bootsteps
from celery.beat import PersistentScheduler
from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

log = logging.getLogger(__name__)

WORKER, BEAT, WATCHER, CYCLE = "worker", "beat", "watcher", "scheduling-cycle"
SCHEDULER = "scheduler"
PROCESSES = (WORKER, BEAT, WATCHER, SCHEDULER)
RUN = 0x1  # celery.bootsteps.RUN, a blueprint that runs (absent from its type stubs)


def host() -> str:
    """This process's host: the pod's name on Kubernetes, so that each replica has its own row."""
    return socket.gethostname()


def beat(name: str, *, now: datetime | None = None) -> None:
    """Record that ``name`` is alive on this host now (one upsert statement)."""
    from core.models import Heartbeat

    row = Heartbeat(name=name, host=host(), pid=os.getpid(), beat_at=now or timezone.now())
    Heartbeat.objects.bulk_create(
        [row], update_conflicts=True, unique_fields=["name", "host"], update_fields=["pid", "beat_at"]
    )


def beat_safely(name: str) -> None:
    """``beat`` from a process's own loop: a database hiccup is logged, never fatal, and no connection is kept."""
    close_old_connections()
    try:
        beat(name)
    except DatabaseError as exc:
        log.warning("could not record the %s heartbeat: %s", name, exc)
    finally:
        close_old_connections()


def ages(*, now: datetime | None = None) -> dict[str, float | None]:
    """Seconds since the freshest heartbeat of each known name (``None``: never seen)."""
    from core.models import Heartbeat

    now = now or timezone.now()
    ages: dict[str, float | None] = dict.fromkeys((*expected(), CYCLE))
    for name, beat_at in Heartbeat.objects.order_by("beat_at").values_list("name", "beat_at"):
        if name in ages:
            ages[name] = max(0.0, (now - beat_at).total_seconds())  # the freshest comes last
    return ages


def expected() -> tuple[str, ...]:
    """The processes that must beat: the scheduler service only where it runs the cycles."""
    return PROCESSES if settings.PORTAL_SCHEDULER == "service" else (WORKER, BEAT, WATCHER)


def own_age(name: str, *, now: datetime | None = None) -> float | None:
    """Seconds since ``name`` last beat on this host (``None``: never)."""
    from core.models import Heartbeat

    beat_at = Heartbeat.objects.filter(name=name, host=host()).values_list("beat_at", flat=True).first()
    return None if beat_at is None else max(0.0, ((now or timezone.now()) - beat_at).total_seconds())


def max_age(name: str) -> float:
    """How old a heartbeat may be before its process counts as stale (settings)."""
    return float(settings.PORTAL_HEALTH_CYCLE_MAX_AGE if name == CYCLE else settings.PORTAL_HEALTH_MAX_AGE)


class WorkerHeartbeat(bootsteps.StartStopStep):
    """A consumer step: beats on the consumer's timer while the consumer is running.

    With an asynchronous broker (Redis) the timer runs in the consumer's own event loop; with the embedded
    filesystem broker, in the worker's timer thread. Either way a stopped or dead process stops beating, and a
    consumer that is restarting (lost broker) does not beat.
    """

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.timer_entry = None

    def start(self, parent):
        beat_safely(WORKER)
        self.timer_entry = parent.timer.call_repeatedly(
            settings.PORTAL_HEARTBEAT_SECONDS, self.tick, (parent,), priority=10
        )

    def stop(self, parent):
        if self.timer_entry is not None:
            self.timer_entry.cancel()
            self.timer_entry = None

    shutdown = stop

    def tick(self, parent) -> None:
        if parent.blueprint.state == RUN:
            beat_safely(WORKER)


class BeatScheduler(PersistentScheduler):
    """Celery beat's default scheduler, with a heartbeat from its own tick (it wakes at least that often)."""

    next_heartbeat = 0.0

    def tick(self, *args, **kwargs):
        interval = settings.PORTAL_HEARTBEAT_SECONDS
        if time.monotonic() >= self.next_heartbeat:
            beat_safely(BEAT)
            self.next_heartbeat = time.monotonic() + interval
        return min(super().tick(*args, **kwargs), interval)
