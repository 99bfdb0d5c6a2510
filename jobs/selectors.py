"""Reads of jobs: what a user may see, and what a job logged."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import Case, F, FloatField, Func, IntegerField, Prefetch, Q, QuerySet, Value, When
from django.db.models.functions import Coalesce

from accounts import permissions
from jobs import lifecycle
from jobs.models import Job, JobEvent


def jobs_for(
    *, user, department: str = "", status: str = "", submitted_by: str = "", search: str = ""
) -> QuerySet[Job]:
    jobs = permissions.scope(
        user, Job.objects.select_related("department", "cluster", "pool", "image", "priority", "submitted_by")
    )
    if department:
        jobs = jobs.filter(department__slug=department)
    if status:
        jobs = jobs.filter(status__in=status.split(","))
    if submitted_by:
        jobs = jobs.filter(submitted_by__username=submitted_by)
    if search:
        jobs = jobs.filter(Q(name__icontains=search) | Q(command__icontains=search) | Q(code_url__icontains=search))
    return jobs


def jobs_page_for(*, user, columns: Sequence[str]) -> QuerySet[Job]:
    """jobs_for(), for a page that reads only ``columns`` of each job and its related rows (the API's list), with
    the submitters fetched apart: by primary key, in a query of their own. Seven tables joined take PostgreSQL
    longer to plan (6-10 ms, bench/api.py) than the page takes to run; six, about 1.5 ms."""
    users = get_user_model().objects.only("username")
    return (
        jobs_for(user=user)
        .select_related(None)
        .select_related("department", "cluster", "pool", "image", "priority")
        .only(*columns, "submitted_by")
        .prefetch_related(Prefetch("submitted_by", queryset=users))
    )


class EpochSeconds(Func):
    """A datetime column as seconds since 1970 (a float), so that durations can be computed and sorted on."""

    output_field = FloatField()
    template = "EXTRACT(EPOCH FROM %(expressions)s)::double precision"  # PostgreSQL

    def as_sqlite(self, compiler, connection, **extra):
        # Django keeps datetimes as UTC text on SQLite; julianday() reads it (fractions of a second included).
        return self.as_sql(compiler, connection, template="((julianday(%(expressions)s) - 2440587.5) * 86400.0)")


def with_progress(jobs: QuerySet[Job], *, now: datetime) -> QuerySet[Job]:
    """Annotate each job with ``run_seconds`` (since its current run started, to its end or ``now``; None
    before it starts) and ``gpu_seconds_now`` (GPU-seconds so far: a job holding GPUs counts them up to
    ``now``, as its ending will; jobs/usage.py ``gpu_seconds_so_far`` is the same for one job)."""
    now_seconds = Value(now.timestamp(), output_field=FloatField())
    return jobs.annotate(
        run_seconds=Case(
            When(started_at__isnull=True, then=Value(None, output_field=FloatField())),
            default=Coalesce(EpochSeconds(F("finished_at")), now_seconds) - EpochSeconds(F("started_at")),
            output_field=FloatField(),
        ),
        gpu_seconds_now=Case(
            When(
                status__in=lifecycle.HOLDS_GPUS,
                admitted_at__isnull=False,
                then=F("gpu_seconds")
                + (now_seconds - EpochSeconds(F("admitted_at"))) * F("workers") * F("gpus_per_worker"),
            ),
            default=F("gpu_seconds"),
            output_field=FloatField(),
        ),
    )


# ?sort= of the jobs list: the column, and "-" in front for the other direction.
JOB_SORTS = ("submitted", "name", "status", "duration", "gpu_hours")
DEFAULT_JOB_SORT = "-submitted"
_STATUS_ORDER = [
    lifecycle.QUEUED,
    lifecycle.ADMITTED,
    lifecycle.STARTING,
    lifecycle.RUNNING,
    lifecycle.SUCCEEDED,
    lifecycle.FAILED,
    lifecycle.CANCELLED,
    lifecycle.PREEMPTED,
]


def sort_valid(sort: str) -> bool:
    return sort.removeprefix("-") in JOB_SORTS


def jobs_sorted(jobs: QuerySet[Job], *, sort: str, now: datetime) -> QuerySet[Job]:
    """Jobs with their progress (``with_progress``) in the order of ``sort`` (one of JOB_SORTS, "-" for
    descending); ties newest first. Jobs without a duration sort last either way."""
    if not sort_valid(sort):
        raise ValueError(f"unknown sort {sort!r}")
    descending, column = sort.startswith("-"), sort.removeprefix("-")
    jobs = with_progress(jobs, now=now)
    if column == "status":
        jobs = jobs.annotate(
            status_order=Case(
                *(When(status=status, then=Value(index)) for index, status in enumerate(_STATUS_ORDER)),
                default=Value(len(_STATUS_ORDER)),
                output_field=IntegerField(),
            )
        )
    key = {
        "submitted": F("created_at"),
        "name": F("name"),
        "status": F("status_order"),
        "duration": F("run_seconds"),
        "gpu_hours": F("gpu_seconds_now"),
    }[column]
    ordered = key.desc(nulls_last=True) if descending else key.asc(nulls_last=True)
    return jobs.order_by(ordered, "-created_at", "-id")


def queue_for(*, user, cluster: str = "", gpu_type: str = "") -> QuerySet[Job]:
    jobs = jobs_for(user=user, status=lifecycle.QUEUED)
    if cluster:
        jobs = jobs.filter(cluster__name=cluster)
    if gpu_type:
        jobs = jobs.filter(pool__gpu_type=gpu_type)
    return jobs.order_by("pool_id", "queue_position", "created_at")


def job_get(*, user, job_id: int) -> Job | None:
    """The job if the user may see it; None otherwise (answered as 404 alike)."""
    return jobs_for(user=user).filter(pk=job_id).first()


def job_events(*, job: Job) -> QuerySet[JobEvent]:
    return job.events.all()


@dataclass(frozen=True)
class GpuSlice:
    """A job's share of one GPU; ``job`` is None when the job belongs to a department the user may not see."""

    fraction: float
    job: Job | None


@dataclass(frozen=True)
class GpuCell:
    index: int
    slices: tuple[GpuSlice, ...]


def gpu_map(*, user, cluster) -> dict[int, list[tuple[str, list[GpuCell]]]]:
    """pool id -> [(node, [GpuCell per GPU index])]: which job (of which department) holds each GPU of the cluster."""
    held: dict[tuple[int, str, int], list[GpuSlice]] = defaultdict(list)
    holding = Job.objects.filter(cluster=cluster, status__in=lifecycle.HOLDS_GPUS).select_related(
        "department", "submitted_by"
    )
    for job in holding:
        shown = job if permissions.can_view(user, job) else None
        for slot in job.placement:
            for gpu in slot["gpus"]:
                held[(job.pool_id, slot["node"], gpu)].append(
                    GpuSlice(fraction=slot.get("gpu_fraction") or 1.0, job=shown)
                )
    return {
        pool.pk: [
            (node, [GpuCell(index=gpu, slices=tuple(held[(pool.pk, node, gpu)])) for gpu in range(pool.gpus_per_node)])
            for node in pool.node_names
        ]
        for pool in cluster.pools.all()
    }
