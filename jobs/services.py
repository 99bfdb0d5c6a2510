"""Training jobs as users ask for them: submit, clone (a job's spec as input again) and cancel.

Launching a job on its cluster's executor and following what the executor reports (launch, observe,
reconcile, stop, collect garbage) is jobs.running's. Admission is not here either: it is
jobs.admission.scheduling_cycle(), which every submit, cancel and ending asks for (jobs.admission.request_cycle: the
scheduler service runs it, or the request itself with PORTAL_SCHEDULER=inline) and which runs periodically.
"""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.services import audit_record
from core.errors import Conflict
from jobs import admission, lifecycle, live, tasks
from jobs.executor_specs import grace_seconds
from jobs.models import Job
from jobs.submission import CleanJob, check_submission
from jobs.transitions import StaleJob, job_created_event, job_transition

# --- Submitting ------------------------------------------------------------------


def job_submit(*, user, data: dict, type_errors: dict | None = None, idempotency_key: str = "") -> tuple[Job, bool]:
    """Create a queued job and run a scheduling cycle. Returns (job, created).

    The same Idempotency-Key from the same user returns the first job instead.
    """
    if idempotency_key:
        existing = Job.objects.filter(submitted_by=user, idempotency_key=idempotency_key).first()
        if existing:
            return existing, False
    clean = check_submission(user=user, data=data, type_errors=type_errors)
    try:
        with transaction.atomic():
            job = Job.objects.create(
                **submitted_fields(clean),
                submitted_by=user,
                idempotency_key=idempotency_key,
                status_message=WAITING_FOR_SCHEDULER,
            )
            job_created_event(job=job, message=f"Submitted by {user.username}.")
            if settings.PORTAL_SCHEDULER != "inline":
                # The scheduler service's request, in the job's own transaction (one commit, not three): its
                # NOTIFY leaves at commit, when the job is there to be seen.
                admission.request_cycle("submitted", job_id=job.pk)
    except IntegrityError:
        # A concurrent request with the same Idempotency-Key won the race.
        if idempotency_key:
            return Job.objects.get(submitted_by=user, idempotency_key=idempotency_key), False
        raise
    if settings.PORTAL_SCHEDULER == "inline":
        admission.request_cycle("submitted")  # the cycle runs here and now, once the job is committed
        # What the cycle decided. Only the job's own columns: a cycle never changes its department, pool, image ...,
        # and refreshing those would drop the objects we hold and cost the API answer six more queries.
        job.refresh_from_db(fields=SCHEDULED_FIELDS)
    return job, True


WAITING_FOR_SCHEDULER = "Submitted: the scheduler decides within a moment."
SCHEDULED_FIELDS = [field.attname for field in Job._meta.concrete_fields if not field.is_relation]


def submitted_fields(clean: CleanJob) -> dict:
    """The columns of a new Job that a checked submission gives (job_submit; render_manifests's unsaved Job)."""
    return {
        "name": clean.name,
        "department": clean.department,
        "cluster": clean.cluster,
        "pool": clean.pool,
        "code_url": clean.code_url,
        "code_ref": clean.code_ref,
        "command": clean.command,
        "image": clean.image,
        "requirements": clean.requirements,
        "workers": clean.workers,
        "gpus_per_worker": clean.gpus_per_worker,
        "priority": clean.priority,
        "mounts": clean.mounts,
        "env": clean.env,
        "tensorboard": clean.tensorboard,
        "max_runtime_seconds": clean.max_runtime_seconds,
    }


def job_as_input(job: Job) -> dict:
    """A job's spec in the API's input shape (for clone)."""
    return {
        "name": job.name,
        "department": job.department.slug,
        "cluster": job.cluster.name,
        "code_url": job.code_url,
        "code_ref": job.code_ref,
        "command": job.command,
        "image": job.image.name,
        "requirements": job.requirements,
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
        "gpu_type": job.pool.gpu_type,
        "priority": job.priority.name,
        "mounts": job.mounts,
        "env": job.env,
        "tensorboard": job.tensorboard,
        "max_runtime_seconds": job.max_runtime_seconds,
    }


# --- Cancelling ------------------------------------------------------------------


def job_cancel(*, user, job: Job) -> Job:
    """Cancel a job. A waiting job ends at once; a launched one gets SIGTERM and its grace period."""
    if job.status in lifecycle.FINAL:
        raise Conflict(f"Job {job.pk} has already {job.status}; there is nothing to cancel.")
    audit_record(
        actor=user,
        action="job.cancel",
        target=f"job {job.pk} ({job.name})",
        department=job.department,
        data={"status": job.status},
    )
    if job.status in (lifecycle.QUEUED, lifecycle.ADMITTED) and job.launched_at is None:
        try:
            message = f"Cancelled by {user.username}."
            job_transition(
                job=job,
                to=lifecycle.CANCELLED,
                reason="cancelled",
                message=message,
                status_message=message,
                pending_reason="",
            )
        except StaleJob:
            job.refresh_from_db()
            return job_cancel(user=user, job=job)
        admission.request_cycle("cancelled")
        return job
    if job.cancel_requested_at is None:
        grace = grace_seconds(job)
        job.cancel_requested_at = timezone.now()
        job.status_message = f"Cancelling (by {user.username}): workers get SIGTERM and {grace} s to finish."
        Job.objects.filter(pk=job.pk).update(
            cancel_requested_at=job.cancel_requested_at, status_message=job.status_message
        )
        live.job_changed(job=job)
        job_id = job.pk
        transaction.on_commit(lambda: tasks.cancel_job.delay(job_id))
    return job
