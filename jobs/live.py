"""Pushing job changes to open browser pages over the channel layer.

Called where jobs change (jobs.transitions, jobs.services); messages leave only
after the transaction commits, so a page never hears of a change that was
rolled back. Layer-agnostic: the same code serves the embedded channels-lite
layer and Redis. Pushing is best effort — pages also poll — so a missing or
unreachable channel layer is logged, never raised into the job's transition.

Groups: ``job.<id>`` (the job page) and ``department.<id>`` (lists, queue and
dashboard of the department's members). Consumers check who may join.

Messages: ``{"type": "job", ...}`` when a job changes state; ``{"type": "queue", "jobs": [...]}``
when a scheduling cycle only moved waiting jobs (position, reason or estimated start).
"""

from __future__ import annotations

import logging
from collections import defaultdict

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
                "time": event.time.isoformat(),
                "from_status": event.from_status,
                "to_status": event.to_status,
                "reason": event.reason,
                "message": event.message,
            }
            for event in events or []
        ],
    }
    groups = [job_group(job.pk), department_group(job.department_id)]
    _send_after_commit(groups, payload, f"of job {job.pk}")


def queue_changed(*, jobs: list) -> None:
    """Tell each department's pages which of its waiting jobs moved or now wait for another reason (after commit).

    One message per department, naming only that department's jobs: a cycle that re-numbers a whole
    pool sends as many messages as there are departments waiting in it, not one per job.
    """
    by_department = defaultdict(list)
    for job in jobs:
        by_department[job.department_id].append(
            {
                "id": job.pk,
                "name": job.name,
                "status": job.status,
                "pending_reason": job.pending_reason,
                "status_message": job.status_message,
                "queue_position": job.queue_position,
                "estimated_start": job.estimated_start.isoformat() if job.estimated_start else None,
                "latest_start": job.latest_start.isoformat() if job.latest_start else None,
            }
        )
    for department_id, changed in by_department.items():
        _send_after_commit(
            [department_group(department_id)],
            {"type": "queue", "jobs": changed},
            f"of the queue of department {department_id}",
        )


def _send_after_commit(groups: list[str], payload: dict, what: str) -> None:
    transaction.on_commit(lambda: _send(groups, payload, what))


def _send(groups: list[str], payload: dict, what: str) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(_send_to_groups)(layer, groups, {"type": MESSAGE_TYPE, "payload": payload})
    except Exception as exc:  # noqa: BLE001 - a push is best effort; pages poll as well
        log.warning("live update %s not pushed: %s", what, exc)


async def _send_to_groups(layer, groups: list[str], message: dict) -> None:
    """Every group in one trip to the event loop (each async_to_sync is one: a job's update goes to two groups)."""
    for group in groups:
        await layer.group_send(group, message)
