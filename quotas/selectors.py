"""Reads of tenancy and capacity: what a user may see, with live usage."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import QuerySet, Sum

from jobs import lifecycle
from jobs.models import Job
from quotas import permissions
from quotas.models import AuditEvent, Cluster, Department, FrameworkImage, PriorityClass, Quota, Storage


@dataclass(frozen=True)
class PoolUsage:
    in_use: float = 0
    borrowed: float = 0
    pending: float = 0


def department_get(*, user, slug: str) -> Department | None:
    """The department if the user may see it; None otherwise (the API answers 404 alike)."""
    return permissions.visible_departments(user).filter(slug=slug).first()


def department_quotas(*, department: Department) -> list[tuple[Quota, PoolUsage]]:
    quotas = Quota.objects.filter(department=department).select_related("pool__cluster")
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
    nominal = {
        (q.department_id, q.pool_id): q.nominal for q in Quota.objects.filter(department_id__in=department_ids)
    }
    return {
        key: PoolUsage(
            in_use=holding[key], borrowed=max(0.0, holding[key] - nominal.get(key, 0)), pending=waiting[key]
        )
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


def clusters_with_pools() -> QuerySet[Cluster]:
    return Cluster.objects.prefetch_related("pools")


def priority_classes() -> QuerySet[PriorityClass]:
    return PriorityClass.objects.all()


def images_for(*, user) -> QuerySet[FrameworkImage]:
    return permissions.scope(user, FrameworkImage.objects.select_related("department"))


def storages_for(*, user) -> QuerySet[Storage]:
    return permissions.scope(user, Storage.objects.select_related("department"))


def audit_events_for(*, user) -> QuerySet[AuditEvent]:
    """Platform admins read every event; department admins those of the departments they manage."""
    events = AuditEvent.objects.select_related("actor", "department")
    if permissions.is_platform_admin(user):
        return events
    managed = [dept_id for dept_id, role in permissions.roles(user).items() if role == "dept_admin"]
    return events.filter(department_id__in=managed)


def lost_gpu_seconds(*, department: Department) -> float:
    return Job.objects.filter(department=department).aggregate(total=Sum("lost_gpu_seconds"))["total"] or 0.0


def jobs_by_id(*, ids: list[int]) -> dict[int, Job]:
    return Job.objects.select_related("department").in_bulk(ids)
