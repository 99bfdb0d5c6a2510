"""Moving a job through its lifecycle: the one writer of Job.status.

Each move is checked by the pure state machine, applied with a conditional
update (so two processes observing the same job cannot both move it), and
recorded as JobEvents — one per status passed through. Leaving a GPU-holding
status releases the GPUs and adds the GPU-seconds held.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from jobs import lifecycle, live
from jobs.models import Job, JobEvent
from webhooks import events as webhook_events


class StaleJob(Exception):
    """Another process moved the job first; reload and decide again."""


def job_transition(
    *, job: Job, to: str, reason: str = "", message: str = "", now: datetime | None = None, **fields
) -> Job:
    now = now or timezone.now()
    steps = lifecycle.path(job.status, to)
    if job.status in lifecycle.HOLDS_GPUS and to not in lifecycle.HOLDS_GPUS and job.admitted_at:
        fields["gpu_seconds"] = job.gpu_seconds + max(0.0, (now - job.admitted_at).total_seconds()) * job.gpus
    if to in lifecycle.FINAL:
        fields.setdefault("finished_at", now)
        fields.setdefault("queue_position", None)
    if to == lifecycle.RUNNING or lifecycle.RUNNING in steps:
        fields.setdefault("started_at", job.started_at or now)
    updated = Job.objects.filter(pk=job.pk, status=job.status).update(status=to, **fields)
    if updated != 1:
        raise StaleJob(f"job {job.pk} is no longer {job.status}")
    previous = job.status
    events = JobEvent.objects.bulk_create(
        JobEvent(
            job=job,
            time=now,
            from_status=before,
            to_status=after,
            reason=reason if after == to else "",
            message=message if after == to else "",
        )
        for before, after in zip([previous, *steps[:-1]], steps)
    )
    job.status = to
    for name, value in fields.items():
        setattr(job, name, value)
    live.job_changed(job=job, events=events)
    webhook_events.job_changed(job=job, reason=reason, message=message)
    return job


def job_created_event(*, job: Job, message: str = "") -> None:
    event = JobEvent.objects.create(
        job=job, time=job.created_at, from_status="", to_status=job.status, reason="submitted", message=message
    )
    live.job_changed(job=job, events=[event])
