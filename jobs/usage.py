"""Reads of GPU usage: what each department holds per pool right now (in use, borrowed, pending), the usage
report over days, users and GPU types (GPU-hours, lost GPU-hours), and which unfinished jobs mount a storage volume.

Usage is counted from Job rows, which is why it lives in jobs/ and not in quotas/."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.db.models import Prefetch, Q, Sum
from django.utils.translation import gettext as _

from accounts.models import Department
from clusters.models import GpuPool
from core.errors import InvalidInput
from jobs import lifecycle
from jobs.models import Job, JobEvent
from quotas.models import Quota
from quotas.selectors import effective_quotas, quotas_of


@dataclass(frozen=True)
class PoolUsage:
    in_use: float = 0
    borrowed: float = 0
    pending: float = 0


def department_quotas(*, department: Department) -> list[tuple[Quota, PoolUsage]]:
    quotas = effective_quotas(Quota.objects.filter(department=department).select_related("pool__cluster"))
    usage = pool_usage_by_department(department_ids=[department.pk])
    return [(quota, usage.get((department.pk, quota.pool_id), PoolUsage())) for quota in quotas]


def pool_usage_by_department(*, department_ids: list[int]) -> dict[tuple[int, int], PoolUsage]:
    """(department id, pool id) -> GPUs in use, borrowed beyond nominal, and waiting."""
    holding: dict[tuple[int, int], float] = defaultdict(float)
    waiting: dict[tuple[int, int], float] = defaultdict(float)
    jobs = Job.objects.filter(department_id__in=department_ids, status__in=[*lifecycle.HOLDS_GPUS, lifecycle.QUEUED])
    for department_id, pool_id, status, workers, gpus in jobs.values_list(
        "department_id", "pool_id", "status", "workers", "gpus_per_worker"
    ):
        (waiting if status == lifecycle.QUEUED else holding)[(department_id, pool_id)] += workers * gpus
    # With active loans: GPUs used within a nominal quota borrowed by a loan are not borrowed.
    quotas = effective_quotas(Quota.objects.filter(department_id__in=department_ids))
    nominal = {(q.department_id, q.pool_id): q.nominal for q in quotas}
    return {
        key: PoolUsage(in_use=holding[key], borrowed=max(0.0, holding[key] - nominal.get(key, 0)), pending=waiting[key])
        for key in set(holding) | set(waiting)
    }


def pool_allocated() -> dict[int, float]:
    """pool id -> GPUs currently allocated to admitted jobs."""
    allocated: dict[int, float] = defaultdict(float)
    for pool_id, workers, gpus in Job.objects.filter(status__in=lifecycle.HOLDS_GPUS).values_list(
        "pool_id", "workers", "gpus_per_worker"
    ):
        allocated[pool_id] += workers * gpus
    return dict(allocated)


def pools_with_quotas(*, department: Department) -> list[tuple[GpuPool, Quota | None]]:
    """Every GPU pool, with the department's quota on it if it has one (the quota form's rows)."""
    quotas = {quota.pool_id: quota for quota in Quota.objects.filter(department=department)}
    return [(pool, quotas.get(pool.pk)) for pool in GpuPool.objects.select_related("cluster")]


USAGE_GROUPS = ("day", "user", "gpu_type")


USAGE_DEFAULT_DAYS = 30


USAGE_MAX_DAYS = 366


@dataclass(frozen=True)
class UsageSegment:
    """GPU-seconds one job held on one UTC day (or lost on it to a preemption)."""

    department: str
    day: date
    user: str
    cluster: str
    gpu_type: str
    gpu_seconds: float
    lost_gpu_seconds: float = 0.0  # of a preemption that day: the part of the run since its last checkpoint


@dataclass(frozen=True)
class Usage:
    start: date  # first day, inclusive (UTC)
    end: date  # last day, inclusive (UTC)
    group_by: str
    departments: tuple[str, ...]
    segments: tuple[UsageSegment, ...]

    @property
    def days(self) -> list[date]:
        return [self.start + timedelta(days=offset) for offset in range((self.end - self.start).days + 1)]

    @property
    def gpu_hours(self) -> float:
        return _hours(sum(segment.gpu_seconds for segment in self.segments))

    @property
    def lost_gpu_hours(self) -> float:
        """GPU-hours of preempted runs that no checkpoint saved (they are part of gpu_hours too)."""
        return _hours(sum(segment.lost_gpu_seconds for segment in self.segments))

    def rows(self, group_by: str | None = None) -> list[dict]:
        """GPU-hours per department and group; groups without usage are left out."""
        group_by = group_by or self.group_by
        fields = {"day": ("day",), "user": ("user",), "gpu_type": ("cluster", "gpu_type")}[group_by]
        totals: dict[tuple, float] = defaultdict(float)
        for segment in self.segments:
            totals[(segment.department, *(getattr(segment, name) for name in fields))] += segment.gpu_seconds
        rows = [
            {
                "department": key[0],
                **{name: _plain(value) for name, value in zip(fields, key[1:])},
                "gpu_hours": _hours(seconds),
            }
            for key, seconds in totals.items()
        ]
        if group_by == "day":
            return sorted(rows, key=lambda row: (row["department"], row["day"]))
        return sorted(rows, key=lambda row: (row["department"], -row["gpu_hours"], *(row[name] for name in fields)))

    def totals(self) -> list[dict]:
        """GPU-hours (and lost GPU-hours) per department in the period, every department asked about (zero included)."""
        seconds: dict[str, float] = dict.fromkeys(self.departments, 0.0)
        lost: dict[str, float] = dict.fromkeys(self.departments, 0.0)
        for segment in self.segments:
            seconds[segment.department] += segment.gpu_seconds
            lost[segment.department] += segment.lost_gpu_seconds
        return [
            {"department": slug, "gpu_hours": _hours(value), "lost_gpu_hours": _hours(lost[slug])}
            for slug, value in sorted(seconds.items())
        ]

    def daily_series(self) -> dict[str, list[float]]:
        """department -> GPU-hours of each day of the period (zeros included), for a chart."""
        index = {day: position for position, day in enumerate(self.days)}
        series = {slug: [0.0] * len(index) for slug in self.departments}
        for segment in self.segments:
            series[segment.department][index[segment.day]] += segment.gpu_seconds
        return {slug: [_hours(value) for value in values] for slug, values in sorted(series.items())}


def usage_get(*, departments, start: str = "", end: str = "", group_by: str = "day", now: datetime) -> Usage:
    """GPU-hours the departments' jobs held between two UTC days (inclusive), from when each job held GPUs.

    A job holds GPUs from admission until it leaves admitted/starting/running
    (ends, or is preempted); its JobEvents say when. A still-running job counts
    up to ``now``, and a run across midnight is split between the days.
    Raises InvalidInput naming each bad parameter (``from``, ``to``, ``group_by``).
    """
    first, last = _usage_period(start=start, end=end, group_by=group_by, today=now.astimezone(UTC).date())
    departments = list(departments)
    window_start = datetime.combine(first, time.min, tzinfo=UTC)
    window_end = min(datetime.combine(last + timedelta(days=1), time.min, tzinfo=UTC), now)
    holding_events = JobEvent.objects.filter(
        Q(from_status__in=lifecycle.HOLDS_GPUS) | Q(to_status__in=lifecycle.HOLDS_GPUS)
    ).order_by("id")
    jobs = (
        Job.objects.filter(department__in=departments, created_at__lt=window_end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=window_start))
        .select_related("department", "submitted_by", "pool__cluster")
        .prefetch_related(Prefetch("events", queryset=holding_events, to_attr="holding_events"))
    )
    segments = []
    for job in jobs:
        for held_from, held_to in _holding_intervals(job, now=now):
            begin, finish = max(held_from, window_start), min(held_to, window_end)
            while begin < finish:
                midnight = datetime.combine(begin.date() + timedelta(days=1), time.min, tzinfo=UTC)
                upto = min(midnight, finish)
                segments.append(
                    UsageSegment(
                        department=job.department.slug,
                        day=begin.date(),
                        user=job.submitted_by.username,
                        cluster=job.pool.cluster.name,
                        gpu_type=job.pool.gpu_type,
                        gpu_seconds=(upto - begin).total_seconds() * job.gpus,
                    )
                )
                begin = upto
        for event in job.holding_events:
            if (
                event.to_status == lifecycle.PREEMPTED
                and event.lost_gpu_seconds
                and window_start <= event.time < window_end
            ):
                segments.append(
                    UsageSegment(
                        department=job.department.slug,
                        day=event.time.astimezone(UTC).date(),
                        user=job.submitted_by.username,
                        cluster=job.pool.cluster.name,
                        gpu_type=job.pool.gpu_type,
                        gpu_seconds=0.0,
                        lost_gpu_seconds=event.lost_gpu_seconds,
                    )
                )
    return Usage(
        start=first,
        end=last,
        group_by=group_by,
        departments=tuple(d.slug for d in departments),
        segments=tuple(segments),
    )


def _holding_intervals(job: Job, *, now: datetime) -> list[tuple[datetime, datetime]]:
    """When the job held GPUs, from its events (in the order written); admitted_at/finished_at if it has none."""
    events = job.holding_events
    if not events:
        if job.admitted_at is None:
            return []
        return [(job.admitted_at, job.finished_at or (now if job.status in lifecycle.HOLDS_GPUS else job.admitted_at))]
    intervals, since = [], None
    for event in events:
        held_before, held_after = event.from_status in lifecycle.HOLDS_GPUS, event.to_status in lifecycle.HOLDS_GPUS
        if held_after and not held_before:
            since = event.time
        elif held_before and not held_after and since is not None:
            intervals.append((since, max(since, event.time)))
            since = None
    if since is not None:
        intervals.append((since, max(since, now if job.status in lifecycle.HOLDS_GPUS else job.finished_at or since)))
    return intervals


def _usage_period(*, start: str, end: str, group_by: str, today: date) -> tuple[date, date]:
    errors: dict[str, list[str]] = {}
    if group_by not in USAGE_GROUPS:
        errors["group_by"] = [_("Group by day, user or gpu_type, not %(value)r.") % {"value": group_by}]

    def parse(name: str, value: str) -> date | None:
        try:
            return date.fromisoformat(value) if value else None
        except ValueError:
            errors[name] = [_("%(value)r is not a date; use YYYY-MM-DD, e.g. 2026-12-01.") % {"value": value}]
            return None

    parsed_first, parsed_last = parse("from", start), parse("to", end)
    if errors:
        raise InvalidInput(errors)
    last = parsed_last or (today if parsed_first is None or parsed_first <= today else parsed_first)
    first = parsed_first or last - timedelta(days=USAGE_DEFAULT_DAYS - 1)
    if first > last:
        errors["from"] = [_("'from' (%(first)s) is after 'to' (%(last)s).") % {"first": first, "last": last}]
    elif (last - first).days + 1 > USAGE_MAX_DAYS:
        errors["to"] = [_("Ask for at most %(days)d days at a time.") % {"days": USAGE_MAX_DAYS}]
    if errors:
        raise InvalidInput(errors)
    return first, last


def _hours(gpu_seconds: float) -> float:
    return round(gpu_seconds / 3600, 6)


def _plain(value):
    return value.isoformat() if isinstance(value, date) else value


def gpu_seconds_so_far(job: Job, *, now: datetime) -> float:
    """The GPU-seconds a job has used up to ``now``: what its earlier runs recorded, plus, while it holds GPUs,
    the current run's since admission (as jobs.transitions records at its ending)."""
    if job.status in lifecycle.HOLDS_GPUS and job.admitted_at is not None:
        return job.gpu_seconds + max(0.0, (now - job.admitted_at).total_seconds()) * job.gpus
    return job.gpu_seconds


def lost_gpu_seconds(*, department: Department) -> float:
    return Job.objects.filter(department=department).aggregate(total=Sum("lost_gpu_seconds"))["total"] or 0.0


def jobs_by_id(*, ids: list[int]) -> dict[int, Job]:
    return Job.objects.select_related("department").in_bulk(ids)


def usage_of(*, departments) -> list[tuple[Department, list[tuple[Quota, PoolUsage]]]]:
    """Per department: each quota with its live usage (the dashboard's bars)."""
    departments = list(departments)
    usage = pool_usage_by_department(department_ids=[department.pk for department in departments])
    quotas: dict[int, list[Quota]] = defaultdict(list)
    for quota in quotas_of(departments=departments):
        quotas[quota.department_id].append(quota)
    return [
        (
            department,
            [(quota, usage.get((department.pk, quota.pool_id), PoolUsage())) for quota in quotas[department.pk]],
        )
        for department in departments
    ]


def storage_users(*, storage, **_signal) -> list[int]:
    """Ids of the department's unfinished jobs that mount the volume, oldest first."""
    return sorted(
        job_id
        for job_id, mounts in Job.objects.filter(department_id=storage.department_id)
        .exclude(status__in=lifecycle.FINAL)
        .values_list("pk", "mounts")
        if any(mount.get("storage") == storage.name for mount in mounts)
    )
