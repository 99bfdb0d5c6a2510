"""Training jobs on their cluster's executor: launch an admitted job, stop one being cancelled or preempted,
apply what the executor reports (job_observe: running, ended, preempted and requeued with its lost
GPU-seconds), reconcile every GPU-holding job with its executor and collect the garbage left on clusters.
The Celery tasks (jobs.tasks) and the cluster watcher (watch_clusters) call these; submit, clone and cancel,
what users ask for, are jobs.services'.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone

from clusters import health
from clusters.errors import ExecutorError
from clusters.health import Health
from clusters.models import Cluster
from clusters.services import (
    cluster_health,
    cluster_health_refresh,
    cluster_settings,
    executor_call,
    kube_for,
    local_executor_root,
)
from core.celery import TransientError
from jobs import admission, lifecycle, live, tasks
from jobs.executor_specs import grace_seconds, job_spec, placement_of
from jobs.executors.base import (
    CANCELLED,
    FAILED,
    LOST,
    RUNNING,
    STARTING,
    SUCCEEDED,
    Executor,
    ObservedState,
)
from jobs.executors.local import LocalExecutor
from jobs.models import Job, JobEvent
from jobs.transitions import StaleJob, job_transition

log = logging.getLogger(__name__)

# After a launch, the worker watches the job this long so that a fast start is
# reported at once instead of at the next reconcile tick.
LAUNCH_WATCH_SECONDS = 3.0
# An admitted job whose launch never happened (a lost task) is launched again after this.
RELAUNCH_AFTER_SECONDS = 30
# A job asked to stop (cancel, preemption) that still holds its GPUs this long after its grace period is
# told again: the worker that held the stop task may have died with it. Stopping is idempotent.
RESEND_STOP_AFTER_SECONDS = 30
# How far in the future a job's checkpoint marker may be dated and still be believed.
CLOCK_SKEW = timedelta(seconds=5)


def executor_for(cluster: Cluster) -> Executor:
    if cluster.backend == Cluster.Backend.LOCAL:
        return LocalExecutor(
            local_executor_root(cluster),
            allow_local_code=bool(cluster.settings.get("allow_local_code", False)),
            isolation=str(cluster.settings.get("isolation", "sandbox")),
            protected_paths=(str(settings.PORTAL_DATA_ROOT), str(settings.BASE_DIR)),
            shared_code=(str(settings.PORTAL_DATA_ROOT / "repos"),),  # where the demo publishes examples/
            shared_storage=(str(settings.PORTAL_DATA_ROOT / "storage"),),  # the demo's volumes (clusters.storage_paths)
            allowed_indexes=tuple(cluster.settings.get("pip_indexes", ())),
            extra_ro_paths=tuple(cluster.settings.get("sandbox_ro_paths", ())),
            log_max_bytes=settings.PORTAL_JOB_LOG_MAX_BYTES,
            disk_max_bytes=settings.PORTAL_JOB_DISK_MAX_BYTES,
        )
    if cluster.backend == Cluster.Backend.KUBERNETES:
        return _kubernetes_executor(cluster)
    raise ExecutorError(
        f"Cluster {cluster.name} uses the {cluster.backend} backend, which is not available.", permanent=True
    )


# One API client per cluster and process (a connection pool); rebuilt when the cluster's settings change.


def _kubernetes_executor(cluster: Cluster) -> Executor:
    from jobs.executors.kubernetes import KubernetesExecutor

    return KubernetesExecutor(kube_for(cluster), cluster_settings(cluster))


def job_stop_on_executor(*, job_id: int) -> None:
    """Stop a job that is being cancelled or preempted: SIGTERM, grace, SIGKILL on its executor."""
    job = Job.objects.select_related("cluster").get(pk=job_id)
    if job.status not in lifecycle.HOLDS_GPUS:
        return
    if job.launched_at is None:
        if job.preempt_requested_at and not job.cancel_requested_at:
            _requeue(job)  # nothing runs yet: give the GPUs back at once
        return
    if not cluster_health_refresh(job.cluster).usable:
        return  # nothing reaches it: the reconcile ends the job after the grace period (_cluster_unusable)
    executor_call(lambda: executor_for(job.cluster).cancel(job.run_id, grace_seconds(job)))


# --- Launching and observing -------------------------------------------------------


def job_launch(*, job_id: int) -> None:
    """Start an admitted job on its cluster's executor (idempotent), then watch it start."""
    job = Job.objects.select_related("cluster", "department", "image", "pool").get(pk=job_id)
    if job.status != lifecycle.ADMITTED:
        return
    if job.preempt_requested_at:
        _requeue(job)
        return
    found = cluster_health_refresh(job.cluster)
    if not found.usable:
        _say_cluster_unusable(job, found)  # the reconcile requeues it after the grace period
        return
    try:
        executor = executor_for(job.cluster)
        executor.launch(job_spec(job), placement_of(job))
    except ExecutorError as exc:
        if not exc.permanent:
            raise TransientError(exc.message) from exc
        _end(job, lifecycle.FAILED, reason="launch_failed", message=exc.message)
        return
    try:
        job_transition(
            job=job,
            to=lifecycle.STARTING,
            reason="launched",
            message="Fetching the code and preparing the environment.",
            launched_at=timezone.now(),
        )
    except StaleJob:
        # Cancelled between admission and launch: stop what was just started.
        job.refresh_from_db()
        if job.status in lifecycle.FINAL:
            executor.cancel(job.run_id, 0)
        return
    deadline = time.monotonic() + LAUNCH_WATCH_SECONDS
    while time.monotonic() < deadline and job.status == lifecycle.STARTING:
        state = executor.poll([job.run_id]).get(job.run_id)
        if state is not None and state.phase != STARTING:
            job_observe(job=job, state=state)
            return
        time.sleep(0.05)


def job_observe(*, job: Job, state: ObservedState) -> bool:
    """Apply what the executor reports. True when the job ended (its GPUs were released)."""
    fields = {"commit": state.commit} if state.commit and state.commit != job.commit else {}
    checkpoint = _from_epoch(state.checkpoint_at) if state.checkpoint_at else None
    if checkpoint and checkpoint > timezone.now() + CLOCK_SKEW:
        checkpoint = None  # the job sets its marker's mtime: one in the future would make every loss vanish
    if checkpoint and (job.checkpoint_at is None or checkpoint > job.checkpoint_at):
        fields["checkpoint_at"] = checkpoint
    try:
        if state.phase == RUNNING and job.status in (lifecycle.ADMITTED, lifecycle.STARTING):
            started = _from_epoch(state.started_at)
            job_transition(
                job=job,
                to=lifecycle.RUNNING,
                reason="running",
                message=f"{job.workers} worker{'s' if job.workers > 1 else ''} running.",
                started_at=started,
                now=started,
                **fields,
            )
        elif state.phase == CANCELLED and job.preempt_requested_at and not job.cancel_requested_at:
            _requeue(
                job,
                now=_from_epoch(state.finished_at) if state.finished_at else None,
                checkpoint_at=fields.get("checkpoint_at"),
            )
            return True
        elif state.phase in (SUCCEEDED, FAILED, CANCELLED, LOST):
            status = {SUCCEEDED: lifecycle.SUCCEEDED, CANCELLED: lifecycle.CANCELLED}.get(state.phase, lifecycle.FAILED)
            reason = state.reason or ("completed" if status == lifecycle.SUCCEEDED else state.phase)
            message = state.message or {lifecycle.SUCCEEDED: "All workers exited 0."}.get(status, "")
            if state.started_at and job.started_at is None:
                fields["started_at"] = _from_epoch(state.started_at)
            _end(
                job,
                status,
                reason=reason,
                message=message,
                exit_code=state.exit_code,
                now=_from_epoch(state.finished_at) if state.finished_at else None,
                **fields,
            )
            return True
        elif fields:
            Job.objects.filter(pk=job.pk).update(**fields)
    except StaleJob:
        log.info("job %s moved while being observed; the next reconcile sees it again", job.pk)
    return False


def jobs_reconcile(*, now: datetime | None = None) -> int:
    """Compare every GPU-holding job with its executor; return how many ended. Runs periodically.

    First the clusters' health is checked where the stored one is stale (clusters.services); the jobs of a
    cluster that cannot be used are not polled: they are told so, and requeued after the grace period.
    """
    now = now or timezone.now()
    _clusters_health(now)
    ended = 0
    active = list(Job.objects.filter(status__in=lifecycle.HOLDS_GPUS).select_related("cluster"))
    by_cluster: dict[int, list[Job]] = {}
    for job in active:
        by_cluster.setdefault(job.cluster_id, []).append(job)
    for jobs in by_cluster.values():
        found = cluster_health(jobs[0].cluster)
        if not found.usable:
            ended += _cluster_unusable(jobs, found, now)
            continue
        executor = executor_for(jobs[0].cluster)
        launched = [job for job in jobs if job.launched_at is not None]
        for job in jobs:
            if job.launched_at is None and (now - job.admitted_at).total_seconds() > RELAUNCH_AFTER_SECONDS:
                tasks.launch_job.delay(job.pk)
            asked = job.cancel_requested_at or job.preempt_requested_at
            if asked and (now - asked).total_seconds() > grace_seconds(job) + RESEND_STOP_AFTER_SECONDS:
                tasks.cancel_job.delay(job.pk)
        if not launched:
            continue
        states = executor_call(lambda: executor.poll([job.run_id for job in launched]))
        for job in launched:
            state = states.get(job.run_id)
            if state is None and (job.cancel_requested_at or job.preempt_requested_at):
                # Asked to stop and now gone (a cluster deletes a cancelled job's objects): it stopped.
                state = ObservedState(
                    phase=CANCELLED,
                    reason="cancelled",
                    finished_at=time.time(),
                    message="Stopped as asked: nothing of the job runs any more.",
                )
            elif state is None:
                state = ObservedState(phase=LOST, reason="lost", message="The executor has no record of this job.")
            ended += job_observe(job=job, state=state)
    admission.periodic_cycle()
    return ended


def jobs_collect_garbage() -> dict[str, list[str]]:
    """Delete what the portal left on its clusters for jobs it no longer knows (a deleted job row, a run
    replaced by a requeue). Objects of jobs it knows stay: their pods keep the logs. Runs periodically."""
    deleted = {}
    for cluster in Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES):
        if cluster_health(cluster).usable:  # an unusable one is collected when it is back (_clusters_health)
            deleted[cluster.name] = _collect_garbage_of(cluster)
    return deleted


def _collect_garbage_of(cluster: Cluster) -> list[str]:
    executor = executor_for(cluster)
    keep = set(Job.objects.filter(cluster=cluster).exclude(run_id="").values_list("run_id", flat=True))
    deleted = executor_call(lambda: executor.collect_garbage(keep))
    if deleted:
        log.info("cluster %s: removed the objects of %d unknown jobs", cluster.name, len(deleted))
    return deleted


# --- Clusters that cannot be used -----------------------------------------------------


def _clusters_health(now: datetime) -> None:
    """Check the clusters whose stored health is stale. A Kubernetes cluster that is back first loses what still
    runs there of jobs requeued while it was away (their runs are no longer the portal's), before any admission."""
    for cluster in Cluster.objects.all():
        was_usable = cluster_health(cluster).usable
        if cluster_health_refresh(cluster, now=now).usable and not was_usable:
            if cluster.backend == Cluster.Backend.KUBERNETES:
                try:
                    _collect_garbage_of(cluster)
                except (ExecutorError, TransientError) as exc:
                    log.warning(
                        "cluster %s: old runs not removed yet (the next collection tries again): %s", cluster.name, exc
                    )


def _cluster_unusable(jobs: list[Job], found: Health, now: datetime) -> int:
    """The jobs holding GPUs on a cluster that cannot be used: each says so; past the grace period (counted from
    when the cluster became unusable, or from the job's admission if later) each goes back to the queue (one
    being cancelled ends cancelled) and gives its GPUs back. Returns how many gave their GPUs back."""
    released = 0
    grace = settings.PORTAL_CLUSTER_GRACE_SECONDS
    for job in jobs:
        since = max(filter(None, [job.cluster.health_since, job.admitted_at]), default=now)
        if not health.requeue_due(unusable_since=since, now=now, grace_seconds=grace):
            _say_cluster_unusable(job, found, requeue_at=since + timedelta(seconds=grace))
            continue
        try:
            if job.cancel_requested_at:
                message = (
                    f"Cancelled. Its cluster {job.cluster.name} cannot be reached, so what ran there is removed when "
                    "it is back."
                )
                _end(job, lifecycle.CANCELLED, reason="cancelled", message=message, run_id="")
            else:
                _requeue(job, now=now, cluster_unusable=found)
        except StaleJob:
            log.info("job %s moved while its cluster was unusable; the next reconcile sees it again", job.pk)
            continue
        released += 1
    return released


def _say_cluster_unusable(job: Job, found: Health, requeue_at: datetime | None = None) -> None:
    """Put the cluster's state in the job's status message (once: only when the message changes)."""
    what = "is not ready" if found.state == health.NOT_READY else "is unreachable"
    message = f"Cluster {job.cluster.name} {what} ({health.short_reason(found)})."
    if requeue_at is not None:
        message += (
            f" Unless it is back by {requeue_at.astimezone(UTC):%H:%M:%S} UTC, the job goes back to the queue then"
            " and gives its GPUs back."
        )
    if job.status_message == message:
        return
    if Job.objects.filter(pk=job.pk, status__in=lifecycle.HOLDS_GPUS).update(status_message=message):
        job.status_message = message
        live.job_changed(job=job)


def _requeue(job: Job, now=None, checkpoint_at: datetime | None = None, cluster_unusable: Health | None = None) -> None:
    """A preempted job goes back to the queue with its original submit time; the GPU-seconds of its run since
    its last checkpoint (the whole run when it wrote no checkpoint marker during it) count as lost.

    ``cluster_unusable``: it goes back because its cluster stayed unusable past the grace period. Its run (if
    it was launched) is then no longer the portal's: the cluster's garbage collection removes it when it is back.
    """
    now = now or timezone.now()
    checkpoint_at = checkpoint_at or job.checkpoint_at
    lost, saved_at = _lost_gpu_seconds(gpus=job.gpus, run_start=job.admitted_at, checkpoint_at=checkpoint_at, now=now)
    why = {
        "reclaim": "its department's borrowed GPUs were reclaimed",
        "priority": "a higher-priority job needed its GPUs",
    }
    reason = job.preempt_reason or "preempted"
    if cluster_unusable is not None:
        reason = "cluster_unreachable"
        why[reason] = (
            f"its cluster {job.cluster.name} stayed unusable for {settings.PORTAL_CLUSTER_GRACE_SECONDS} s "
            f"({health.short_reason(cluster_unusable)})"
        )
    if saved_at is not None:
        since = f"since its last checkpoint at {timezone.localtime(saved_at):%H:%M:%S}"
    else:
        since = "since the run started; it wrote no checkpoint marker during the run"
    changes = {"checkpoint_at": checkpoint_at} if checkpoint_at != job.checkpoint_at else {}
    job_transition(
        job=job,
        to=lifecycle.PREEMPTED,
        reason=reason,
        now=now,
        message=f"Stopped because {why.get(reason, 'it was preempted')}; {lost:.0f} GPU-seconds lost {since}.",
        lost_gpu_seconds=job.lost_gpu_seconds + lost,
        preemptions=job.preemptions + 1,
        **changes,
    )
    JobEvent.objects.filter(
        pk__in=job.events.filter(to_status=lifecycle.PREEMPTED).order_by("-id").values("pk")[:1]
    ).update(lost_gpu_seconds=lost)
    job_transition(
        job=job,
        to=lifecycle.QUEUED,
        reason="requeued",
        message="Queued again, keeping its original submit time.",
        now=now,
        status_message="",
        preempt_requested_at=None,
        preempt_reason="",
        placement=[],
        admitted_at=None,
        launched_at=None,
        started_at=None,  # run_id stays: its logs show until the next run starts
        **({"run_id": ""} if cluster_unusable is not None else {}),  # not the portal's any more: collected
    )
    admission.request_cycle("requeued")


def _lost_gpu_seconds(
    *, gpus: float, run_start: datetime | None, checkpoint_at: datetime | None, now: datetime
) -> tuple[float, datetime | None]:
    """GPU-seconds a run stopped at ``now`` loses, and the checkpoint that saved the rest (None: nothing saved).

    The checkpoint marker is the job's, not the run's: one older than this run's start saves nothing of it.
    """
    if run_start is None:
        return 0.0, None
    saved_at = checkpoint_at if checkpoint_at is not None and run_start < checkpoint_at else None
    return max(0.0, (now - (saved_at or run_start)).total_seconds()) * gpus, saved_at


def _end(job: Job, status: str, *, reason: str, message: str, **fields) -> None:
    job_transition(job=job, to=status, reason=reason, message=message, status_message=message, **fields)
    admission.request_cycle("ended")


def _from_epoch(seconds: float | None) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC) if seconds else timezone.now()
