"""Reads of tenancy and capacity: what a user may see, with live usage."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet

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
    """(department id, pool id) -> GPUs in use, borrowed beyond nominal, and waiting.

    Nothing holds GPUs until training jobs exist; the jobs app fills this in.
    """
    return {}


def pool_allocated() -> dict[int, float]:
    """pool id -> GPUs currently allocated to admitted jobs."""
    return {}


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
