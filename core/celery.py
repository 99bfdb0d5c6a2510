"""The Celery app. Tasks live in each app's ``tasks.py``: they take ids and call one service."""

import os

from celery import Celery, Task
from django.db import InterfaceError, OperationalError

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


class TransientError(Exception):
    """Raised by a service for a failure that is worth retrying (a cluster or broker blip)."""


class PortalTask(Task):
    # Transient failures are retried with exponential backoff; anything else
    # fails the task at once so the error is visible instead of looping.
    autoretry_for = (TransientError, OperationalError, InterfaceError, ConnectionError, TimeoutError)
    retry_backoff = 2
    retry_backoff_max = 300
    retry_jitter = True
    max_retries = 8
    acks_late = True


app = Celery("portal", task_cls=PortalTask)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# The worker's heartbeat (/healthz, `manage.py heartbeat --check worker`): a step of its consumer, named by its
# path so that this module stays below the heartbeats it starts (core/heartbeats.py).
app.steps["consumer"].add("core.heartbeats:WorkerHeartbeat")
