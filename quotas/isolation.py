"""Where cluster settings meet quotas: a cluster that runs jobs unisolated (isolation "none") serves one
department only, so saving such a cluster, or giving a second department a quota on it, is refused.

Every writer of ``Cluster.settings`` (the Django admin, the demo) saves through ``cluster_save`` here.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from accounts.models import AuditEvent, Department
from clusters.cluster_settings import ISOLATION_NONE, cluster_settings_errors, isolation
from clusters.models import Cluster, GpuPool
from core.errors import InvalidInput
from quotas.models import Quota


def cluster_check(*, cluster: Cluster) -> None:
    """Raises InvalidInput({"settings": [...]}) when the cluster's (unsaved) settings cannot be used."""
    departments = []
    if cluster.pk is not None:
        departments = list(Quota.objects.filter(pool__cluster=cluster).values_list("department__slug", flat=True))
    errors = cluster_settings_errors(
        name=cluster.name, backend=cluster.backend, settings=cluster.settings, departments=departments
    )
    if errors:
        raise InvalidInput({"settings": errors})


def cluster_save(*, actor, cluster: Cluster) -> Cluster:
    """Check and save a cluster's backend and settings, audited with what they were before (when a person did it)."""
    with transaction.atomic():
        cluster_check(cluster=cluster)
        try:
            cluster.full_clean()
        except ValidationError as exc:
            raise InvalidInput(exc.message_dict) from exc
        before = Cluster.objects.filter(pk=cluster.pk).values("backend", "settings").first() if cluster.pk else None
        cluster.save()
        if actor is not None:  # a person's change (the demo's seed data is nobody's action)
            AuditEvent.objects.create(
                actor=actor,
                action="cluster.update" if before else "cluster.create",
                target=cluster.name,
                data={"before": before, "after": {"backend": cluster.backend, "settings": cluster.settings}},
            )
    return cluster


def quota_isolation_refusal(*, pool: GpuPool, department: Department) -> str | None:
    """Why ``department`` may not have a quota in ``pool``: its cluster runs jobs unisolated for another department."""
    cluster = pool.cluster
    if isolation(cluster) != ISOLATION_NONE:
        return None
    others = sorted(
        set(
            Quota.objects.filter(pool__cluster=cluster)
            .exclude(department_id=department.pk)
            .values_list("department__slug", flat=True)
        )
    )
    if not others:
        return None
    return _(
        'Cluster %(cluster)s runs jobs unisolated (isolation "none") for %(others)s only; a second department '
        'needs its jobs sandboxed: set the cluster\'s isolation to "sandbox" first.'
    ) % {"cluster": cluster.name, "others": ", ".join(others)}
