"""Reads of capacity: clusters with their pools, and the storage volumes a user may see."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts import permissions
from accounts.models import Department
from clusters.models import Cluster, Storage


def clusters_with_pools() -> QuerySet[Cluster]:
    return Cluster.objects.prefetch_related("pools")


def storages_for(*, user) -> QuerySet[Storage]:
    return permissions.scope(user, Storage.objects.select_related("department"))


def storages_of(*, department: Department) -> QuerySet[Storage]:
    return Storage.objects.filter(department=department).order_by("name")


def cluster_get(*, name: str) -> Cluster | None:
    """Clusters are shared: every signed-in user may see them."""
    return clusters_with_pools().filter(name=name).first()
