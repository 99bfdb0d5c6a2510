"""Pushing job changes to open browser pages over the channel layer.

Called where jobs change (jobs.transitions, jobs.services); messages leave only
after the transaction commits, so a page never hears of a change that was
rolled back. Layer-agnostic: the same code serves the embedded channels-lite
layer and Redis. Pushing is best effort — pages also poll — so a missing or
unreachable channel layer is logged, never raised into the job's transition.

Groups: ``job.<id>`` (the job page) and ``department.<id>`` (lists, queue and
dashboard of the department's members). Consumers check who may join.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

MESSAGE_TYPE = "job.update"  # handled by the consumers' job_update()


def job_group(job_id: int) -> str:
    return f"job.{job_id}"


def department_group(department_id: int) -> str:
    return f"department.{department_id}"


def job_changed(*, job, events: list | None = None) -> None:
    """Tell the job's page and its department's pages what the job looks like now (after commit)."""
    payload = {
        "type": "job",
        "job": {
            "id": job.pk,
            "name": job.name,
            "status": job.status,
            "pending_reason": job.pending_reason,
            "status_message": job.status_message,
            "queue_position": job.queue_position,
        },
        "events": [
            {
                "time": event.time.isoformat(), "from_status": event.from_status, "to_status": event.to_status,
                "reason": event.reason, "message": event.message,
            }
            for event in events or []
        ],
    }
    groups = [job_group(job.pk), department_group(job.department_id)]
    transaction.on_commit(lambda: _send(groups, payload))


def _send(groups: list[str], payload: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        for group in groups:
            async_to_sync(layer.group_send)(group, {"type": MESSAGE_TYPE, "payload": payload})
    except Exception as exc:  # noqa: BLE001 - a push is best effort; pages poll as well
        log.warning("live update of job %s not pushed: %s", payload["job"]["id"], exc)
