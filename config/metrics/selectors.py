"""The aggregate reads behind /metrics: a fixed handful of queries, whatever the number of jobs."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import connections
from django.db.models import Count, DurationField, ExpressionWrapper, F, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

from accounts.models import Department
from clusters.models import GpuPool
from jobs import lifecycle
from jobs.models import Job, JobEvent
from quotas.models import Quota
from quotas.selectors import effective_quotas
from serving.models import VariantStats

Key = tuple[int, int]  # (department id, pool id)

# Upper bounds (seconds) of the admission-wait histogram: a job admitted at once to a week in the queue.
ADMISSION_WAIT_BOUNDS_S = (
    1,
    5,
    15,
    30,
    60,
    120,
    300,
    600,
    1200,
    1800,
    3600,
    7200,
    14400,
    28800,
    43200,
    86400,
    172800,
    345600,
    604800,
)


class Waits(NamedTuple):
    """The admissions of one (department, pool) and how long their jobs had waited."""

    count: int
    at_most: list[int]  # admissions that had waited at most each of ADMISSION_WAIT_BOUNDS_S
    seconds: float  # the waits summed


def pools() -> list[GpuPool]:
    return list(GpuPool.objects.select_related("cluster").order_by("cluster__name", "gpu_type"))


def department_slugs() -> dict[int, str]:
    return dict(Department.objects.values_list("pk", "slug"))


def nominal_gpus() -> dict[Key, int]:
    """With active quota loans (quotas.selectors.effective_quotas), as the scheduler sees them."""
    return {(q.department_id, q.pool_id): q.nominal for q in effective_quotas(Quota.objects.only(*NOMINAL_FIELDS))}


NOMINAL_FIELDS = ("department_id", "pool_id", "nominal", "lending_limit")


def queued_since() -> list[tuple[int, int, datetime]]:
    """(department id, pool id, since when it waits) of every queued job.

    A job re-queued after a preemption waits since its last move to ``queued``, not since it was submitted.
    """
    last_queued = JobEvent.objects.filter(job=OuterRef("pk"), to_status=lifecycle.QUEUED).order_by("-time", "-id")
    return list(
        Job.objects.filter(status=lifecycle.QUEUED)
        .annotate(since=Coalesce(Subquery(last_queued.values("time")[:1]), F("created_at")))
        .order_by()
        .values_list("department_id", "pool_id", "since")
    )


def gpus_held() -> dict[Key, float]:
    """GPUs held by admitted, starting and running jobs."""
    rows = (
        Job.objects.filter(status__in=lifecycle.HOLDS_GPUS)
        .order_by()
        .values("department_id", "pool_id")
        .annotate(gpus=Sum(F("workers") * F("gpus_per_worker")))
    )
    return {(row["department_id"], row["pool_id"]): float(row["gpus"]) for row in rows}


def admissions() -> dict[Key, Waits]:
    """Admissions ever recorded (each a JobEvent, so the count only grows while jobs are kept), with their waits.

    A wait is measured as queued_since() measures the running ones: from the job's last move to ``queued`` before
    the admission (its submission, or its re-queue after a preemption; ``created_at`` without such an event) to
    the admission. One query: the waits are a derived table, counted, bucketed and summed in the database. The ORM
    alone repeats the wait's subquery in every bucket's aggregate (5 s for 50,000 admissions, against 0.2 s so),
    and fetching a row per admission would move the whole history at every scrape.
    """
    queued = JobEvent.objects.filter(job=OuterRef("job"), to_status=lifecycle.QUEUED, id__lt=OuterRef("id")).order_by(
        "-id"
    )
    waited = ExpressionWrapper(
        F("time") - Coalesce(Subquery(queued.values("time")[:1]), F("job__created_at")), output_field=DurationField()
    )
    waits = (
        JobEvent.objects.filter(to_status=lifecycle.ADMITTED)
        .order_by()
        .annotate(wait=waited)
        .values_list("job__department_id", "job__pool_id", "wait")
    )
    # A LIMIT keeps SQLite and PostgreSQL from merging the derived table into the outer query, which would
    # repeat the subquery in every CASE; no portal holds 2**62 admissions.
    inner, inner_params = waits[: 2**62].query.sql_with_params()
    database = connections[waits.db]
    department, pool, wait = (
        f"w.{database.ops.quote_name(name)}" for name in ("job__department_id", "job__pool_id", "wait")
    )
    duration = DurationField()

    def bound(seconds: float):  # as the backend keeps durations: microseconds (SQLite), an interval (PostgreSQL)
        return duration.get_db_prep_value(timedelta(seconds=seconds), database)

    at_most = ", ".join(f"SUM(CASE WHEN {wait} <= %s THEN 1 ELSE 0 END)" for _ in ADMISSION_WAIT_BOUNDS_S)
    # Two machines' clocks may disagree a little: a wait below 0 counts as 0 (it is in every bucket already).
    sql = (
        f"SELECT {department}, {pool}, COUNT(*), SUM(CASE WHEN {wait} < %s THEN %s ELSE {wait} END), {at_most} "
        f"FROM ({inner}) w GROUP BY {department}, {pool}"
    )
    with database.cursor() as cursor:
        cursor.execute(
            sql, [bound(0), bound(0), *(bound(seconds) for seconds in ADMISSION_WAIT_BOUNDS_S), *inner_params]
        )
        rows = cursor.fetchall()
    return {
        (department_id, pool_id): Waits(count, [int(n) for n in counts], _seconds(total))
        for department_id, pool_id, count, total, *counts in rows
    }


def _seconds(total) -> float:
    if total is None:
        return 0.0
    return total.total_seconds() if isinstance(total, timedelta) else total / 1_000_000  # SQLite: microseconds


def preemptions() -> dict[tuple[int, int, str], int]:
    """Preemptions ever recorded, by reason (reclaim, priority, service, move)."""
    rows = (
        JobEvent.objects.filter(to_status=lifecycle.PREEMPTED)
        .order_by()
        .values("job__department_id", "job__pool_id", "reason")
        .annotate(count=Count("id"))
    )
    return {(row["job__department_id"], row["job__pool_id"], row["reason"]): row["count"] for row in rows}


def jobs_finished() -> dict[tuple[int, str], int]:
    """(department id, final status) -> jobs that ended so (a final status never changes)."""
    rows = (
        Job.objects.filter(status__in=lifecycle.FINAL)
        .order_by()
        .values("department_id", "status")
        .annotate(count=Count("id"))
    )
    return {(row["department_id"], row["status"]): row["count"] for row in rows}


def variant_stats() -> list[VariantStats]:
    """The routers' flushed counters of every variant, with its deployment's name."""
    return list(
        VariantStats.objects.select_related("variant__deployment").order_by(
            "variant__deployment__name", "variant__name"
        )
    )
