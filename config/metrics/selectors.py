"""The aggregate reads behind /metrics: a fixed handful of queries, whatever the number of jobs."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, F, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

from jobs import lifecycle
from jobs.models import Job, JobEvent
from serving.models import VariantStats
from accounts.models import Department
from clusters.models import GpuPool
from quotas.models import Quota

Key = tuple[int, int]  # (department id, pool id)


def pools() -> list[GpuPool]:
    return list(GpuPool.objects.select_related("cluster").order_by("cluster__name", "gpu_type"))


def department_slugs() -> dict[int, str]:
    return dict(Department.objects.values_list("pk", "slug"))


def nominal_gpus() -> dict[Key, int]:
    return {(d, p): n for d, p, n in Quota.objects.values_list("department_id", "pool_id", "nominal")}


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
        Job.objects.filter(status__in=lifecycle.HOLDS_GPUS).order_by().values("department_id", "pool_id")
        .annotate(gpus=Sum(F("workers") * F("gpus_per_worker")))
    )
    return {(row["department_id"], row["pool_id"]): float(row["gpus"]) for row in rows}


def admissions() -> dict[Key, int]:
    """Admissions ever recorded (each a JobEvent, so the count only grows while jobs are kept)."""
    rows = (
        JobEvent.objects.filter(to_status=lifecycle.ADMITTED).order_by()
        .values("job__department_id", "job__pool_id").annotate(count=Count("id"))
    )
    return {(row["job__department_id"], row["job__pool_id"]): row["count"] for row in rows}


def preemptions() -> dict[tuple[int, int, str], int]:
    """Preemptions ever recorded, by reason (reclaim, priority, service, move)."""
    rows = (
        JobEvent.objects.filter(to_status=lifecycle.PREEMPTED).order_by()
        .values("job__department_id", "job__pool_id", "reason").annotate(count=Count("id"))
    )
    return {(row["job__department_id"], row["job__pool_id"], row["reason"]): row["count"] for row in rows}


def jobs_finished() -> dict[tuple[int, str], int]:
    """(department id, final status) -> jobs that ended so (a final status never changes)."""
    rows = Job.objects.filter(status__in=lifecycle.FINAL).order_by().values("department_id", "status").annotate(count=Count("id"))
    return {(row["department_id"], row["status"]): row["count"] for row in rows}


def variant_stats() -> list[VariantStats]:
    """The routers' flushed counters of every variant, with its deployment's name."""
    return list(VariantStats.objects.select_related("variant__deployment").order_by("variant__deployment__name", "variant__name"))
