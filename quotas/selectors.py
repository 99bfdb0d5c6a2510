"""Reads of tenancy and capacity: what a user may see, with live usage."""

from __future__ import annotations

from django.db.models import QuerySet

from clusters.models import Cluster
from quotas.models import PriorityClass, Quota


def default_cluster(*, department) -> Cluster | None:
    """The department's default cluster, for jobs and deployments that name none: the oldest cluster it has
    quota on (a newly added cluster does not silently become everybody's default); None without quota."""
    quota = (
        Quota.objects.filter(department=department)
        .select_related("pool__cluster")
        .order_by("pool__cluster_id", "pool__gpu_type")
        .first()
    )
    return quota.pool.cluster if quota is not None else None


def priority_classes() -> QuerySet[PriorityClass]:
    return PriorityClass.objects.all()


# --- Department admin console (frontend/console.py) ------------------------------------


# --- Usage report (API.md "Usage and audit") ----------------------------------------


# --- Browser pages (frontend) ---------------------------------------------------------


def quotas_of(*, departments) -> QuerySet[Quota]:
    """Quotas of these departments, in the order submission picks defaults (oldest cluster, then GPU type)."""
    return (
        Quota.objects.filter(department__in=departments)
        .select_related("department", "pool__cluster")
        .order_by("department__slug", "pool__cluster_id", "pool__gpu_type")
    )
