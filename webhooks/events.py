"""What each event says, and the hooks that the services which make the change call (one line each).

Each hook runs inside the transaction of the change, after it, and builds the event's ``data`` from the
API's own representation essentials. URLs are paths on the portal, as in the REST API.
"""

from __future__ import annotations

from django.urls import reverse

from webhooks.services import event_emit

JOB_EVENTS = {"succeeded": "job.succeeded", "failed": "job.failed", "cancelled": "job.cancelled"}


def job_changed(*, job, reason: str = "", message: str = "") -> None:
    """After a job's status changed: an event when it ended (succeeded, failed, cancelled)."""
    event = JOB_EVENTS.get(job.status)
    if event is None:
        return
    event_emit(
        department=job.department,
        event=event,
        data={
            "id": job.pk,
            "name": job.name,
            "status": job.status,
            "reason": reason,
            "message": message or job.status_message,
            "exit_code": job.exit_code,
            "finished_at": job.finished_at.isoformat() if job.finished_at else None,
            "urls": {
                "api": reverse("api-job", args=[job.pk]),
                "page": reverse("job-detail", args=[job.pk]),
                "logs": reverse("api-job-logs", args=[job.pk]),
            },
        },
    )


def version_registered(*, version) -> None:
    model = version.model
    event_emit(
        department=model.department,
        event="model.version_registered",
        data={
            "model": model.name,
            "version": version.version,
            "framework": version.framework,
            "lineage": version.lineage,
            "metrics": version.metrics,
            "urls": {
                "api": reverse("api-model-version", args=[model.name, version.version]),
                "page": reverse("model-detail", args=[model.name]),
            },
        },
    )


def alias_moved(*, model, alias: str, from_version: int | None, to_version: int | None) -> None:
    """An alias set (from_version null when new), moved, or removed (to_version null)."""
    event_emit(
        department=model.department,
        event="model.alias_moved",
        data={
            "model": model.name,
            "alias": alias,
            "from_version": from_version,
            "to_version": to_version,
            "urls": {
                "api": reverse("api-model", args=[model.name]),
                "page": reverse("model-detail", args=[model.name]),
            },
        },
    )


def deployment_changed(*, deployment, status: str | None, reason: str, revision: int) -> None:
    """After a deployment's variants changed: an event when it was rolled back (by a person or a guardrail)."""
    if status != "rolled_back":
        return
    event_emit(
        department=deployment.department,
        event="deployment.rolled_back",
        data={
            "name": deployment.name,
            "reason": reason,
            "revision": revision,
            "model": deployment.model.name,
            "automatic": reason.startswith("automatic rollback"),
            "urls": {
                "api": reverse("api-deployment", args=[deployment.name]),
                "page": reverse("deployment-detail", args=[deployment.name]),
            },
        },
    )
