"""Asking before submitting: would this job start now, and if not, why, where in the queue, when, and what
would start sooner (docs/architecture.md "Asking before submitting").

``job_preview`` checks the body exactly as a submission (jobs.submission: the same 400s, the same 404-like
refusals of another department's cluster or pool), then runs the scheduler's stateless cycle on the queue of the
job's pool as it is now plus the would-be job (jobs.admission.what_if, the path the quota what-if uses too).
Nothing is written and no lock is taken: a preview reads the queue, so a concurrent submission either is in what
it reads or is not, and neither changes the other.

Alternatives are the same job with one change that makes it start strictly sooner and is itself a valid
submission: fewer GPUs per worker (halving down to 1), fewer workers (halving down to 1), or another cluster or
GPU type where the department has quota.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from clusters.services import cluster_health
from core.errors import InvalidInput
from jobs import admission, lifecycle
from jobs.models import Job
from jobs.runtimes import Runtimes, runtimes_for
from jobs.services import submitted_fields
from jobs.submission import CleanJob, check_submission
from quotas.models import Quota
from quotas.scheduler import Snapshot, schedule
from quotas.scheduler.eta import StartRanges, has_expectations, with_expected_runtimes

PREVIEW_JOB_ID = -1  # the would-be job in the snapshot: never the id of a saved job
SOONER_BY_SECONDS = admission.ETA_TOLERANCE_SECONDS  # "sooner" by less than the estimates' own tolerance is noise

# What the scheduler does not read (the live form previews while these are still being typed). Values that every
# cluster accepts stand in for them when only they are missing or wrong; a submission still checks the real ones.
NOT_SCHEDULING = {
    "name": "preview",
    "code_url": "https://git.example.com/preview.git",
    "code_ref": "",
    "command": "true",
    "requirements": [],
    "mounts": [],
    "env": {},
    "tensorboard": False,
}


@dataclass(frozen=True)
class Alternative:
    change: dict  # the submission's fields that change, e.g. {"gpus_per_worker": 4}
    estimated_start: datetime


@dataclass(frozen=True)
class Preview:
    would_start: bool
    pending_reason: str  # "" when it would start now
    status_message: str
    queue_position: int | None
    # Likely, from how long similar jobs ran (jobs.runtimes); now when it would start now; None: no estimate.
    estimated_start: datetime | None
    alternatives: tuple[Alternative, ...] = ()
    # At the latest, if every job ahead runs to its limit (what estimated_start was before runtimes from history).
    latest_start: datetime | None = None


def job_preview(
    *, user, data: dict, type_errors: dict | None = None, now: datetime | None = None, partial: bool = False
) -> Preview:
    """What the scheduler would do with this submission now. Raises InvalidInput like ``job_submit``.

    ``partial``: the submit form asks while it is filled in; problems only in fields the scheduler does not read
    (name, code, command, requirements, mounts, environment) are left for the submission to report.
    """
    now = now or timezone.now()
    clean = _check(user, data, type_errors, partial)
    pools = {clean.pool.pk} | set(Quota.objects.filter(department=clean.department).values_list("pool_id", flat=True))
    queues = _queues(pools)
    history = _history(pools, queues, user, clean, now)
    preview = _outcome(user, clean, queues, history, now)
    if preview.would_start:
        return preview
    base = data if not partial else {**data, **{k: v for k, v in NOT_SCHEDULING.items() if k not in data}}
    found = []
    for change in _changes(clean):
        try:
            other = _check(user, {**base, **change}, type_errors, partial)
        except InvalidInput:
            continue  # not a valid submission: not offered
        outcome = _outcome(user, other, queues, history, now)
        if _sooner(outcome, preview):
            assert outcome.estimated_start is not None  # _sooner says so
            found.append(Alternative(change=change, estimated_start=outcome.estimated_start))
    found.sort(key=lambda alternative: alternative.estimated_start)
    return Preview(**{**preview.__dict__, "alternatives": tuple(found)})


def _check(user, data: dict, type_errors: dict | None, partial: bool) -> CleanJob:
    try:
        return check_submission(user=user, data=data, type_errors=type_errors)
    except InvalidInput as exc:
        if not partial or not set(exc.errors) <= set(NOT_SCHEDULING):
            raise
    stand_in = {**data, **NOT_SCHEDULING}
    kept = {field: messages for field, messages in (type_errors or {}).items() if field not in NOT_SCHEDULING}
    return check_submission(user=user, data=stand_in, type_errors=kept)


def _queues(pool_ids: set[int]) -> dict[int, list[Job]]:
    """pool id -> the jobs queued there now that the cycle offers to the scheduler (their cluster takes jobs)."""
    queues: dict[int, list[Job]] = {pool_id: [] for pool_id in pool_ids}
    usable: dict[int, bool] = {}
    for job in Job.objects.filter(status=lifecycle.QUEUED, pool_id__in=list(pool_ids)).select_related(
        "pool__cluster", "priority", "department"
    ):
        cluster = job.pool.cluster
        if cluster.pk not in usable:
            usable[cluster.pk] = cluster_health(cluster).usable
        if usable[cluster.pk]:
            queues[job.pool_id].append(job)
    return queues


def _history(pools: set[int], queues: dict[int, list[Job]], user, clean: CleanJob, now: datetime) -> Runtimes:
    """How long the jobs in these pools (and jobs like the would-be one) likely run: two queries in all. The
    snapshots of what_if take their expected durations from it (jobs.admission.cycle_snapshot)."""
    holding = list(
        Job.objects.filter(status__in=lifecycle.HOLDS_GPUS, pool_id__in=list(pools)).only(
            "pk", "submitted_by", "department", "code_url", "command", "workers", "gpus_per_worker",
            "max_runtime_seconds",
        )
    )  # fmt: skip
    probe = Job(submitted_by=user, department=clean.department)
    return runtimes_for([*(job for queue in queues.values() for job in queue), *holding, probe], now=now)


def _outcome(user, clean: CleanJob, queues: dict[int, list[Job]], history: Runtimes, now: datetime) -> Preview:
    job = Job(**submitted_fields(clean), submitted_by=user, pk=PREVIEW_JOB_ID, created_at=now)
    queued = [*queues.get(clean.pool.pk, []), job]
    snapshot, decisions = admission.what_if(queued=queued, now=now, runtimes=history)
    if any(admitted.job_id == PREVIEW_JOB_ID for admitted in decisions.admissions):
        return Preview(
            would_start=True,
            pending_reason="",
            status_message="",
            queue_position=None,
            estimated_start=now,
            latest_start=now,
        )
    waiting = next((w for w in decisions.waiting if w.job_id == PREVIEW_JOB_ID), None)
    if waiting is not None and snapshot is not None:
        pending = next(p for p in snapshot.pending if p.job_id == PREVIEW_JOB_ID)
        likely, latest = StartRanges(snapshot, now=now.timestamp()).of(
            pending, waiting.reason, latest=waiting.estimated_start, likely=_likely_start(snapshot, now)
        )
        return Preview(
            would_start=False,
            pending_reason=waiting.reason,
            status_message=waiting.message,
            queue_position=waiting.position,
            estimated_start=admission.as_moment(likely),
            latest_start=admission.as_moment(latest),
        )
    # Neither admitted nor told why (the scheduler explains every job it does not admit): say so plainly.
    return Preview(would_start=False, pending_reason="", status_message="", queue_position=None, estimated_start=None)


def _likely_start(snapshot: Snapshot, now: datetime) -> float | None:
    """The same cycle with likely durations instead of limits (quotas.scheduler.eta.with_expected_runtimes), before
    the quota floor (StartRanges adds it). The scheduling cycle stores a cheaper likely start, on its own decisions
    (jobs.admission.start_ranges); a preview asks what the queue would do if jobs ran as long as usual."""
    if not has_expectations(snapshot):
        return None  # nothing known beyond the limits: the latest start is all there is
    decisions = schedule(with_expected_runtimes(snapshot), now=now.timestamp())
    found = next((w for w in decisions.waiting if w.job_id == PREVIEW_JOB_ID), None)
    if found is None:  # the likely world admits it now (backfill with shorter jobs): soon, but not a promise
        return now.timestamp()
    return found.estimated_start


def _changes(clean: CleanJob) -> list[dict]:
    """One-field (or one-place) changes that might start sooner, smallest first within each kind."""
    changes: list[dict] = []
    per_worker = clean.gpus_per_worker
    if per_worker > 1:
        fewer = int(per_worker) // 2
        while fewer >= 1:
            changes.append({"gpus_per_worker": fewer})
            fewer //= 2
    workers = clean.workers // 2
    while workers >= 1:
        changes.append({"workers": workers})
        workers //= 2
    elsewhere = (
        Quota.objects.filter(department=clean.department)
        .exclude(pool=clean.pool)
        .select_related("pool__cluster")
        .order_by("pool__cluster__name", "pool__gpu_type")
    )
    for quota in elsewhere:
        changes.append({"cluster": quota.pool.cluster.name, "gpu_type": quota.pool.gpu_type})
    return changes


def _sooner(candidate: Preview, current: Preview) -> bool:
    """Starting now beats waiting, whatever the wait's estimate says (it ignores node shapes); otherwise the
    estimates decide, by more than their tolerance. No estimate is later than any."""
    if candidate.would_start:
        return not current.would_start
    if candidate.estimated_start is None:
        return False
    if current.estimated_start is None:
        return True
    return (current.estimated_start - candidate.estimated_start).total_seconds() > SOONER_BY_SECONDS
