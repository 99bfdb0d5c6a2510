"""Writes to tenancy and capacity: quotas, memberships, and the audit trail."""

from __future__ import annotations

from collections import defaultdict

from django.db import transaction
from django.db.models import Sum

from config.errors import InvalidInput
from quotas.models import AuditEvent, Department, GpuPool, Quota


def audit_record(*, actor, action: str, target: str, department: Department | None = None, data: dict | None = None) -> AuditEvent:
    return AuditEvent.objects.create(actor=actor, action=action, target=target, department=department, data=data or {})


def quota_set(*, actor, department: Department, quotas: list[dict]) -> list[Quota]:
    """Replace all quotas of a department at once.

    Each item: cluster, gpu_type, nominal, borrowing_limit (None = unlimited),
    lending_limit (None = all unused nominal). Rejects, per item, unknown pools,
    duplicates, a lending limit above nominal, and nominal guarantees that
    together with other departments' would exceed what the pool has.
    """
    pools = {
        (pool.cluster.name, pool.gpu_type): pool
        for pool in GpuPool.objects.select_related("cluster")
    }
    item_errors: list[dict] = [{} for _ in quotas]
    seen: set[tuple[str, str]] = set()
    wanted: dict[int, int] = defaultdict(int)
    for index, item in enumerate(quotas):
        key = (item["cluster"], item["gpu_type"])
        pool = pools.get(key)
        if pool is None:
            types = sorted(t for c, t in pools if c == item["cluster"])
            if not types:
                item_errors[index]["cluster"] = [f"No cluster named {item['cluster']!r}."]
            else:
                item_errors[index]["gpu_type"] = [
                    f"Cluster {item['cluster']!r} has no {item['gpu_type']!r} GPUs; it has: {', '.join(types)}."
                ]
            continue
        if key in seen:
            item_errors[index]["gpu_type"] = [f"{item['cluster']}/{item['gpu_type']} is listed twice; give one quota per pool."]
            continue
        seen.add(key)
        if item.get("lending_limit") is not None and item["lending_limit"] > item["nominal"]:
            item_errors[index]["lending_limit"] = [
                f"Cannot lend {item['lending_limit']} GPUs out of a nominal quota of {item['nominal']}."
            ]
        wanted[pool.pk] = item["nominal"]

    with transaction.atomic():
        # Lock the pools so two concurrent quota changes cannot together promise
        # more GPUs than a pool has.
        locked = {pool.pk: pool for pool in GpuPool.objects.select_for_update().filter(pk__in=list(wanted))}
        others = dict(
            Quota.objects.filter(pool_id__in=list(wanted))
            .exclude(department=department)
            .values("pool_id")
            .annotate(total=Sum("nominal"))
            .values_list("pool_id", "total")
        )
        for index, item in enumerate(quotas):
            pool = pools.get((item["cluster"], item["gpu_type"]))
            if pool is None or "nominal" in item_errors[index] or pool.pk not in locked:
                continue
            promised = others.get(pool.pk, 0) + item["nominal"]
            if promised > locked[pool.pk].total:
                item_errors[index]["nominal"] = [
                    f"{pool} has {locked[pool.pk].total} GPUs and other departments are guaranteed "
                    f"{others.get(pool.pk, 0)}: at most {locked[pool.pk].total - others.get(pool.pk, 0)} can be nominal here."
                ]
        if any(item_errors):
            raise InvalidInput({"quotas": item_errors})

        before = _quota_dicts(department)
        Quota.objects.filter(department=department).delete()
        created = Quota.objects.bulk_create(
            Quota(
                department=department,
                pool=pools[(item["cluster"], item["gpu_type"])],
                nominal=item["nominal"],
                borrowing_limit=item.get("borrowing_limit"),
                lending_limit=item.get("lending_limit"),
            )
            for item in quotas
        )
        audit_record(
            actor=actor, action="quota.set", target=department.slug, department=department,
            data={"before": before, "after": _quota_dicts(department)},
        )
    return created


def _quota_dicts(department: Department) -> list[dict]:
    return [
        {
            "cluster": q.pool.cluster.name, "gpu_type": q.pool.gpu_type, "nominal": q.nominal,
            "borrowing_limit": q.borrowing_limit, "lending_limit": q.lending_limit,
        }
        for q in Quota.objects.filter(department=department).select_related("pool__cluster")
    ]
