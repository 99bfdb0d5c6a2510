"""Admission: the Django side of the scheduler (docs/architecture.md "The scheduling cycle").

``scheduling_cycle()`` snapshots queued and holding jobs, quotas and pools, asks the pure scheduler
(quotas.scheduler) what to admit, preempt or move, and applies its decisions to Job rows through
jobs.transitions, one cycle at a time across processes. ``quota_preview`` runs the same cycle on proposed quotas
without writing anything (``what_if``, which jobs.preview uses for a would-be job too). A quota or priority change
reaches it through quotas.signals.capacity_changed."""

from __future__ import annotations

import logging
import math
import secrets
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import Department
from clusters.cluster_settings import setup_timeout_seconds
from clusters.health import Health
from clusters.health import refusal as cluster_health_refusal
from clusters.services import cluster_health
from core import heartbeats
from jobs import lifecycle, live, tasks
from jobs.models import CycleRequest, Job
from jobs.runtimes import Runtimes, runtimes_for
from jobs.transitions import job_transition
from quotas.models import Quota
from quotas.scheduler import (
    Admission,
    Decisions,
    PendingJob,
    PoolState,
    Preemption,
    QuotaState,
    RunningJob,
    Slot,
    Snapshot,
    Waiting,
    schedule,
)
from quotas.scheduler.eta import StartRanges, expected_end, likely_end, likely_starts
from quotas.scheduler.incremental import IncrementalScheduler
from quotas.selectors import effective_quotas
from quotas.services import quotas_check

log = logging.getLogger(__name__)


def _quota_state(quota: Quota, *, recent_usage: float = 0.0) -> QuotaState:
    """A department's quota row as the scheduler sees it."""
    return QuotaState(
        department=quota.department.slug,
        pool_id=quota.pool_id,
        nominal=quota.nominal,
        borrowing_limit=quota.borrowing_limit,
        lending_limit=quota.lending_limit,
        recent_usage=recent_usage,
        # Borrowed by a quota loan: only preemptible work may use it, to be reclaimable at the loan's end.
        fixed_nominal=quota.own_nominal if quota.loans_in else None,
    )


def quota_preview(*, department: Department, quotas: list[dict]) -> Decisions:
    """What one scheduling cycle would do if the department had these quotas. Changes nothing."""
    pools = quotas_check(department=department, quotas=quotas, lock=False)
    proposed = [
        Quota(
            department=department,
            pool=pools[(i["cluster"], i["gpu_type"])],
            nominal=i["nominal"],
            borrowing_limit=i.get("borrowing_limit"),
            lending_limit=i.get("lending_limit"),
        )
        for i in quotas
    ]
    others = list(Quota.objects.exclude(department=department).select_related("department"))
    # Active loans move the proposed nominal quotas as they move the stored ones.
    states = [_quota_state(q) for q in effective_quotas(proposed + others)]
    queued = list(Job.objects.filter(status=lifecycle.QUEUED).select_related("pool__cluster", "priority", "department"))
    return what_if(queued=queued, quotas=states)[1]


def what_if(
    *,
    queued: list[Job],
    quotas: list[QuotaState] | None = None,
    now: datetime | None = None,
    runtimes: Runtimes | None = None,
) -> tuple[Snapshot | None, Decisions]:
    """One cycle on these queued jobs (saved or not: jobs.preview adds a would-be one) with the stored quotas or
    ``quotas``: (what the scheduler saw, None without queued jobs; what it decided). ``runtimes``: the jobs'
    expected durations go into the snapshot (cycle_snapshot). Writes nothing and takes no lock: the what-if paths
    (quota_preview, jobs.preview)."""
    if not queued:
        return None, Decisions()
    now = now or timezone.now()
    snapshot, _ = cycle_snapshot(queued=queued, quotas=quotas, now=now, runtimes=runtimes)
    return snapshot, schedule(snapshot, now=now.timestamp())


def start_ranges(
    snapshot: Snapshot, decisions: Decisions, *, now: datetime
) -> dict[int, tuple[datetime | None, datetime | None]]:
    """waiting job id -> (likely start, start at the latest) after this cycle: the scheduler's estimate on the
    limits, and the same estimate on the durations history expects (quotas.scheduler.eta.likely_starts, from the
    snapshot's expected runtimes), neither before the department's quota lets the job in nor before ``now``."""
    moment = now.timestamp()
    likely = likely_starts(snapshot, decisions, now=moment)
    ranges = StartRanges(snapshot, now=moment)
    pending = {job.job_id: job for job in snapshot.pending}
    found = {}
    for waiting in decisions.waiting:
        start, latest = ranges.of(
            pending[waiting.job_id], waiting.reason, latest=waiting.estimated_start, likely=likely.get(waiting.job_id)
        )
        found[waiting.job_id] = (as_moment(start), as_moment(latest))
    return found


def as_moment(seconds: float | None) -> datetime | None:
    """A time of the scheduler (seconds since the epoch) as an aware datetime."""
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)


ETA_TOLERANCE_SECONDS = 60


CYCLE_LOCK_KEY = 0x6770755F  # "gpu_": one scheduling cycle at a time across processes
LEADER_LOCK_KEY = 0x6770754C  # "gpuL": the scheduler service's leader (core/leases.py)
CHANNEL = "portal_scheduler"  # PostgreSQL NOTIFY channel the service's leader listens on


def request_cycle(reason: str, *, job_id: int | None = None) -> None:
    """A change that may admit, preempt or move jobs happened (``reason``: submitted, ended, cancelled, requeued,
    capacity): have a scheduling cycle look at it.

    With the scheduler service (PORTAL_SCHEDULER=service) this only records the request, in the caller's
    transaction, and on PostgreSQL NOTIFYs the leader (delivered at commit); the service coalesces a burst into one
    cycle (jobs/scheduler_service.py). Inline (PORTAL_SCHEDULER=inline: tests, a single process) the cycle runs
    here and now. ``job_id``: the job a submission queued (the service may then decide it alone, service_cycle).
    """
    if settings.PORTAL_SCHEDULER == "inline":
        scheduling_cycle()
        return
    CycleRequest.objects.create(reason=reason[:40], job_id=job_id)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, reason])


def periodic_cycle(*, now: datetime | None = None) -> Decisions | None:
    """The reconcile's cycle (every PORTAL_RECONCILE_SECONDS). With the scheduler service, that service runs its own
    every PORTAL_SCHEDULER_PERIOD_SECONDS and this does nothing, unless no cycle ran for three of its periods (the
    service is down): then it runs one, with a warning, so that jobs keep being admitted while it is restarted."""
    if settings.PORTAL_SCHEDULER == "inline":
        return scheduling_cycle(now=now)
    age = heartbeats.ages(now=now).get(heartbeats.CYCLE)
    if age is not None and age <= 3 * settings.PORTAL_SCHEDULER_PERIOD_SECONDS:
        return None
    log.warning(
        "no scheduling cycle for %s s: is the scheduler service (manage.py run_scheduler) running? "
        "The reconcile runs one meanwhile.",
        "ever" if age is None else f"{age:.0f}",
    )
    return scheduling_cycle(now=now)


class ServiceMemory:
    """What the scheduler service keeps between its cycles (service_cycle): the incremental scheduler of its last full
    cycle, when that cycle admitted and evicted nothing, with the GPU-holding jobs it saw. Anything else: empty."""

    def __init__(self) -> None:
        self.scheduler: IncrementalScheduler | None = None
        self.at: datetime | None = None
        self.holding: dict[int, bool] = {}  # job id -> stopping, of the jobs holding GPUs in its pools
        self.arrival_cycles = 0

    def keep(self, scheduler: IncrementalScheduler, at: datetime, holding: dict[int, Job]) -> None:
        self.scheduler, self.at = scheduler, at
        self.holding = {pk: bool(job.cancel_requested_at or job.preempt_requested_at) for pk, job in holding.items()}

    def forget(self) -> None:
        self.scheduler, self.at, self.holding = None, None, {}


def service_cycle(memory: ServiceMemory, *, arrivals: list[int] | None, now: datetime | None = None) -> Decisions:
    """The scheduler service's cycle. ``arrivals``: the jobs queued since the last cycle, when submissions are all
    that happened (their requests say so), else None. Where the last full cycle decided nothing, is younger than
    PORTAL_SCHEDULER_PERIOD_SECONDS, and the jobs holding GPUs in its pools are still the ones it saw, the new jobs
    are decided alone on what it kept (``IncrementalScheduler`` arrival cycles, docs/architecture.md): the others
    would wait as they did. Otherwise, and whatever that check cannot vouch for, a full cycle."""
    now = now or timezone.now()
    if arrivals:
        decisions = _arrival_cycle(memory, arrivals, now)
        if decisions is not None:
            return decisions
    return scheduling_cycle(now=now, memory=memory)


def _arrival_cycle(memory: ServiceMemory, arrivals: list[int], now: datetime) -> Decisions | None:
    """The new jobs decided alone, with the same lock and conditional updates as a full cycle; None where a full
    cycle is needed."""
    scheduler, at = memory.scheduler, memory.at
    if scheduler is None or at is None or (now - at).total_seconds() > settings.PORTAL_SCHEDULER_PERIOD_SECONDS:
        return None
    moment = now.timestamp()
    with transaction.atomic():
        _lock_cycle()
        jobs = list(
            Job.objects.filter(pk__in=arrivals, status=lifecycle.QUEUED).select_related(
                "pool__cluster", "priority", "department"
            )
        )
        pools = {job.pool_id for job in jobs}
        if (
            len(jobs) != len(set(arrivals))  # one was admitted, cancelled or deleted meanwhile
            or any(not scheduler.settled(pool_id, moment) for pool_id in pools | scheduler.waiting_pools())
            or any(not cluster_health(job.pool.cluster).usable for job in jobs)
            or _holding_now(scheduler.pool_ids()) != memory.holding
        ):
            memory.forget()
            return None
        heartbeats.beat(heartbeats.CYCLE)
        # a job the last full cycle read already (its request came after that cycle read the requests) waits as
        # that cycle said: it is not new to the scheduler
        jobs = [job for job in jobs if scheduler.job(job.pk) is None]
        expected = runtimes_for(jobs, now=now)
        for job in jobs:
            scheduler.add_pending(pending_view(job, expected))
        decisions = scheduler.cycle(moment)
        memory.arrival_cycles += 1
        by_id = {job.pk: job for job in jobs}
        if any(admission.job_id not in by_id for admission in decisions.admissions):
            memory.forget()
            raise RuntimeError("an arrival cycle admitted a job that is not new; nothing was applied")
        for admission in decisions.admissions:
            _admit(by_id[admission.job_id], admission, now)
        for preemption in decisions.preemptions:
            _preempt(preemption.job_id, preemption, now)
        if decisions.admissions or decisions.preemptions:
            memory.forget()  # what they change is read afresh by the next cycle
        # the new jobs' reasons (an earlier job waits as the last full cycle said); their estimates come with the
        # next full cycle
        moved = [
            by_id[waiting.job_id]
            for waiting in decisions.waiting
            if waiting.job_id in by_id and _tell_waiting(by_id[waiting.job_id], waiting, None, None)
        ]
        live.queue_changed(jobs=moved)
    return decisions


def _holding_now(pool_ids: set[int]) -> dict[int, bool]:
    """job id -> stopping, of the jobs holding GPUs in these pools now (as ServiceMemory.keep has them)."""
    rows = Job.objects.filter(status__in=lifecycle.HOLDS_GPUS, pool_id__in=list(pool_ids)).values_list(
        "pk", "cancel_requested_at", "preempt_requested_at"
    )
    return {pk: bool(cancel or preempt) for pk, cancel, preempt in rows}


def scheduling_cycle(*, now: datetime | None = None, memory: ServiceMemory | None = None) -> Decisions:
    """Admit what fits, start preemptions, and tell every waiting job why and roughly when.

    The one way jobs get admitted. Runs in one transaction under a
    cross-process lock, and moves each job with a conditional update, so
    concurrent cycles and submissions cannot over-admit. Launching and
    stopping happen after commit, in the worker. ``memory`` (the scheduler service's): kept for arrival cycles
    when this cycle decides nothing (service_cycle).
    """
    now = now or timezone.now()
    if memory is not None:
        memory.forget()
    with transaction.atomic():
        _lock_cycle()
        heartbeats.beat(heartbeats.CYCLE)  # /healthz: the age of the last cycle
        queued = {
            job.pk: job
            for job in Job.objects.filter(status=lifecycle.QUEUED).select_related(
                "pool__cluster", "priority", "department"
            )
        }
        _hold_for_unusable_clusters(queued)  # they wait, saying why, and are not offered to the scheduler
        if not queued:
            return Decisions()
        snapshot, holding = cycle_snapshot(queued=list(queued.values()), now=now, from_history=True)
        if memory is None:
            decisions = schedule(snapshot, now=now.timestamp())
        else:  # the same decisions (tests/quotas/test_incremental_equivalence.py), and an object to keep
            scheduler = IncrementalScheduler(snapshot, arrivals_window=settings.PORTAL_SCHEDULER_PERIOD_SECONDS)
            decisions = scheduler.cycle(now.timestamp())
            if not decisions.admissions and not decisions.preemptions:
                memory.keep(scheduler, now, holding)
        for admission in decisions.admissions:
            _admit(queued[admission.job_id], admission, now)
        for preemption in decisions.preemptions:
            _preempt(preemption.job_id, preemption, now)
        ranges = start_ranges(snapshot, decisions, now=now)
        moved = [
            queued[waiting.job_id]
            for waiting in decisions.waiting
            if _tell_waiting(queued[waiting.job_id], waiting, *ranges[waiting.job_id])
        ]
        # No transition tells their departments' open pages about these: say it once per department.
        live.queue_changed(jobs=moved)
    return decisions


def _tell_waiting(job: Job, waiting: Waiting, likely: datetime | None, latest: datetime | None) -> bool:
    """Write why ``job`` waits, its place and start range, where they changed (an estimate only when it moves by
    more than a minute), with a conditional update; True if it was written."""
    if (
        (job.pending_reason, job.status_message, job.queue_position)
        == (waiting.reason, waiting.message, waiting.position)
        and not _moved(job.estimated_start, likely)
        and not _moved(job.latest_start, latest)
    ):
        return False
    if not Job.objects.filter(pk=job.pk, status=lifecycle.QUEUED).update(
        pending_reason=waiting.reason,
        status_message=waiting.message,
        queue_position=waiting.position,
        estimated_start=likely,
        latest_start=latest,
    ):
        return False
    job.pending_reason, job.status_message = waiting.reason, waiting.message
    job.queue_position, job.estimated_start, job.latest_start = waiting.position, likely, latest
    return True


def _hold_for_unusable_clusters(queued: dict[int, Job]) -> None:
    """Take out of ``queued`` the jobs whose cluster cannot take jobs now (its stored health, no network call):
    they keep waiting with the reason ``cluster_unreachable`` and the cluster's message, and are admitted once
    the reconcile finds it usable again."""
    unusable: dict[int, Health] = {}
    for job in queued.values():
        found = cluster_health(job.pool.cluster)
        if not found.usable:
            unusable[job.pk] = found
    moved = []
    for job_id, found in unusable.items():
        job = queued.pop(job_id)
        message = cluster_health_refusal(job.pool.cluster.name, found) or ""
        if (job.pending_reason, job.status_message) != ("cluster_unreachable", message) and Job.objects.filter(
            pk=job.pk, status=lifecycle.QUEUED
        ).update(pending_reason="cluster_unreachable", status_message=message, estimated_start=None, latest_start=None):
            job.pending_reason, job.status_message = "cluster_unreachable", message
            job.estimated_start = job.latest_start = None
            moved.append(job)
    live.queue_changed(jobs=moved)


def _moved(before: datetime | None, after: datetime | None) -> bool:
    """An estimate is rewritten only when it moves by more than a minute, not on every cycle's new "now"."""
    if before is None or after is None:
        return before != after
    return abs((after - before).total_seconds()) > ETA_TOLERANCE_SECONDS


def _lock_cycle() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CYCLE_LOCK_KEY])


def _recent_usage(pools, now: datetime | None = None) -> dict[tuple[str, int], float]:
    """(department, pool) -> GPUs used on average lately, each finished run's GPU-seconds decayed by its age.

    Only for pools whose cluster weighs it in fair share (setting ``fair_share_usage_weight``; the
    half-life is ``fair_share_half_life_hours``, default 24). Runs still going count through the
    GPUs they hold now, their earlier runs here.
    """
    now = now or timezone.now()
    recent: dict[tuple[str, int], float] = defaultdict(float)
    for pool in pools:
        settings = pool.cluster.settings
        if not float(settings.get("fair_share_usage_weight", 0)):
            continue
        half_life = float(settings.get("fair_share_half_life_hours", 24)) * 3600
        since = now - timedelta(seconds=8 * half_life)  # older runs weigh less than 0.4%
        rows = (
            Job.objects.filter(pool=pool, gpu_seconds__gt=0)
            .filter(Q(finished_at__gte=since) | Q(finished_at__isnull=True))
            .values_list("department__slug", "gpu_seconds", "finished_at")
        )
        for department, gpu_seconds, finished in rows:
            age = max(0.0, (now - (finished or now)).total_seconds())
            # a GPU-second that long ago, spread over the mean life of the decay (half-life / ln 2)
            recent[(department, pool.pk)] += gpu_seconds * 0.5 ** (age / half_life) * math.log(2) / half_life
    return recent


def cycle_snapshot(
    *,
    queued: list[Job],
    quotas: list[QuotaState] | None = None,
    now: datetime | None = None,
    runtimes: Runtimes | None = None,
    from_history: bool = False,
) -> tuple[Snapshot, dict[int, Job]]:
    """What the scheduler sees of the pools the queued jobs wait for; ``quotas`` replaces the stored ones (what-if);
    ``now`` decides which quota loans are active (default: now).

    ``runtimes`` (or, with ``from_history``, one grouped query of jobs.runtimes over the queued and holding jobs)
    give the jobs their expected durations, for the likely estimates only: ``PendingJob.expected_runtime`` and
    ``RunningJob.expected_end`` (quotas.scheduler.eta.likely_end); decisions keep the limits."""
    pools = {job.pool_id: job.pool for job in queued}
    holding = {
        job.pk: job
        for job in Job.objects.filter(status__in=lifecycle.HOLDS_GPUS, pool_id__in=list(pools)).select_related(
            "priority", "department"
        )
    }
    at = (now or timezone.now()).timestamp()
    if runtimes is None and from_history:
        runtimes = runtimes_for([*queued, *holding.values()], now=now)
    expected = runtimes or Runtimes()
    used: dict[int, dict[tuple[str, int], float]] = {pool_id: defaultdict(float) for pool_id in pools}
    running = []
    for job in holding.values():
        slots = tuple(
            Slot(worker=s["worker"], node=s["node"], gpus=tuple(s["gpus"]), fraction=s.get("gpu_fraction"))
            for s in job.placement
        )
        for slot in slots:
            for gpu in slot.gpus:
                used[job.pool_id][(slot.node, gpu)] += slot.fraction or 1.0
        started = (job.admitted_at or job.created_at).timestamp()
        runtime = expected.of(job)
        began = job.started_at.timestamp() if job.started_at else started
        running.append(
            RunningJob(
                job_id=job.pk,
                pool_id=job.pool_id,
                department=job.department.slug,
                priority=job.priority.value,
                preemptible=job.priority.preemptible,
                gpus=job.gpus,
                slots=slots,
                started_at=started,
                deadline=expected_end(
                    admitted_at=started,
                    running_since=job.started_at.timestamp() if job.started_at else None,
                    max_runtime=job.max_runtime_seconds,
                    setup_seconds=setup_timeout_seconds(pools[job.pool_id].cluster),
                ),
                terminating=bool(job.cancel_requested_at or job.preempt_requested_at),
                attained=job.gpu_seconds,  # earlier runs; this one counts from started_at
                checkpoint_every=float(pools[job.pool_id].cluster.settings.get("checkpoint_seconds", 0)) or None,
                expected_end=None
                if runtime is None
                else likely_end(began=began, now=at, runtime=runtime, limit=job.max_runtime_seconds),
            )
        )
    if quotas is None:
        recent = _recent_usage(pools.values())
        quotas = [
            _quota_state(q, recent_usage=recent.get((q.department.slug, q.pool_id), 0.0))
            # With the nominal quotas active loans make (quotas.selectors.effective_quotas).
            for q in effective_quotas(
                Quota.objects.filter(pool_id__in=list(pools)).select_related("department"), now=now
            )
        ]
    snapshot = Snapshot(
        pools={
            pool.pk: PoolState(
                pool_id=pool.pk,
                name=str(pool),
                nodes=tuple(pool.node_names),
                gpus_per_node=pool.gpus_per_node,
                shareable=pool.shareable,
                used=dict(used[pool.pk]),
                placement=pool.placement,
                min_runtime_seconds=float(pool.cluster.settings.get("min_runtime_seconds", 0)),
                usage_weight=float(pool.cluster.settings.get("fair_share_usage_weight", 0)),
            )
            for pool in pools.values()
        },
        pending=tuple(pending_view(job, expected) for job in queued),
        running=tuple(running),
        quotas=tuple(quotas),
        fifo=dict(Department.objects.values_list("slug", "queueing")),
    )
    return snapshot, holding


def pending_view(job: Job, expected: Runtimes) -> PendingJob:
    """What the scheduler sees of a queued job."""
    return PendingJob(
        job_id=job.pk,
        pool_id=job.pool_id,
        department=job.department.slug,
        priority=job.priority.value,
        submitted_at=job.created_at.timestamp(),
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
        preemptible=job.priority.preemptible,
        max_runtime=job.max_runtime_seconds,
        nominated=job.pending_reason == "preemption_in_progress",
        attained=job.gpu_seconds,
        expected_runtime=expected.of(job),
    )


def _preempt(job_id: int, preemption: Preemption, now: datetime) -> None:
    """Ask a running job to stop for another; it is re-queued when it has stopped (jobs.services.job_observe)."""
    updated = Job.objects.filter(pk=job_id, status__in=lifecycle.HOLDS_GPUS, preempt_requested_at__isnull=True).update(
        preempt_requested_at=now,
        preempt_reason=preemption.reason,
        status_message=f"{preemption.message} Workers get SIGTERM and the grace period, then it is queued again.",
    )
    if updated:
        transaction.on_commit(lambda: tasks.cancel_job.delay(job_id))


def _admit(job: Job, admission: Admission, now: datetime) -> None:
    placement = [
        {"worker": slot.worker, "node": slot.node, "gpus": list(slot.gpus), "gpu_fraction": slot.fraction}
        for slot in admission.slots
    ]
    where = ", ".join(
        f"worker {slot.worker} on {slot.node}"
        + (f" GPU {','.join(map(str, slot.gpus))}" if slot.gpus else "")
        + (f" ({slot.fraction:g} share)" if slot.fraction else "")
        for slot in admission.slots
    )
    job_transition(
        job=job,
        to=lifecycle.ADMITTED,
        reason="admitted",
        message=f"Admitted: {where}.",
        now=now,
        placement=placement,
        admitted_at=now,
        pending_reason="",
        status_message="",
        queue_position=None,
        run_id=f"{job.pk}-{secrets.token_hex(4)}",
        launched_at=None,
    )
    job_id = job.pk
    transaction.on_commit(lambda: tasks.launch_job.delay(job_id))


def on_capacity_changed(**_signal) -> None:
    """quotas.signals.capacity_changed: a larger quota or a new priority may admit waiting jobs at once."""
    request_cycle("capacity")
