"""Writes to tenancy and capacity: quotas, members, priority classes, the audit trail,
and admission (the scheduling cycle). Storage volumes: clusters.storage."""

from __future__ import annotations

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction
from django.db.models import Sum
from django.utils.translation import gettext as _

from accounts.models import Department
from accounts.services import audit_record, require_platform_admin
from clusters.models import GpuPool
from core.errors import InvalidInput
from quotas import signals
from quotas.isolation import quota_isolation_refusal
from quotas.models import PriorityClass, Quota


def quotas_check(*, department: Department, quotas: list[dict], lock: bool) -> dict[tuple[str, str], GpuPool]:
    """Every problem of a proposed quota set, per item; raises InvalidInput. Returns the pools by (cluster, gpu_type).

    Rejects unknown pools, duplicates, a lending limit above nominal, and nominal
    guarantees that together with other departments' would exceed what the pool has.
    """
    pools = {(pool.cluster.name, pool.gpu_type): pool for pool in GpuPool.objects.select_related("cluster")}
    item_errors: list[dict] = [{} for _ in quotas]
    seen: set[tuple[str, str]] = set()
    for index, item in enumerate(quotas):
        key = (item["cluster"], item["gpu_type"])
        if key not in pools:
            types = sorted(t for c, t in pools if c == item["cluster"])
            if not types:
                item_errors[index]["cluster"] = [f"No cluster named {item['cluster']!r}."]
            else:
                item_errors[index]["gpu_type"] = [
                    f"Cluster {item['cluster']!r} has no {item['gpu_type']!r} GPUs; it has: {', '.join(types)}."
                ]
            continue
        if key in seen:
            item_errors[index]["gpu_type"] = [
                f"{item['cluster']}/{item['gpu_type']} is listed twice; give one quota per pool."
            ]
            continue
        seen.add(key)
        refusal = quota_isolation_refusal(pool=pools[key], department=department)
        if refusal:
            item_errors[index]["cluster"] = [refusal]
            continue
        if item.get("lending_limit") is not None and item["lending_limit"] > item["nominal"]:
            item_errors[index]["lending_limit"] = [
                f"Cannot lend {item['lending_limit']} GPUs out of a nominal quota of {item['nominal']}."
            ]
    wanted = [pools[(i["cluster"], i["gpu_type"])].pk for i in quotas if (i["cluster"], i["gpu_type"]) in pools]
    # Locking the pools keeps two concurrent quota changes from together promising more GPUs than a pool has.
    rows = GpuPool.objects.select_for_update() if lock else GpuPool.objects
    totals = {pool.pk: pool.total for pool in rows.filter(pk__in=wanted)}
    others = dict(
        Quota.objects.filter(pool_id__in=wanted)
        .exclude(department=department)
        .values("pool_id")
        .annotate(total=Sum("nominal"))
        .values_list("pool_id", "total")
    )
    for index, item in enumerate(quotas):
        pool = pools.get((item["cluster"], item["gpu_type"]))
        if pool is None or {"cluster", "gpu_type"} & set(item_errors[index]):
            continue
        if others.get(pool.pk, 0) + item["nominal"] > totals[pool.pk]:
            item_errors[index]["nominal"] = [
                f"{pool} has {totals[pool.pk]} GPUs and other departments are guaranteed {others.get(pool.pk, 0)}: "
                f"at most {totals[pool.pk] - others.get(pool.pk, 0)} can be nominal here."
            ]
    if any(item_errors):
        raise InvalidInput({"quotas": item_errors})
    return pools


def quota_set(*, actor, department: Department, quotas: list[dict]) -> list[Quota]:
    """Replace all quotas of a department at once (items: cluster, gpu_type, nominal, borrowing_limit, lending_limit)."""
    with transaction.atomic():
        pools = quotas_check(department=department, quotas=quotas, lock=True)
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
            actor=actor,
            action="quota.set",
            target=department.slug,
            department=department,
            data={"before": before, "after": _quota_dicts(department)},
        )
    signals.capacity_changed.send(sender=Quota)  # a larger quota may admit waiting jobs at once
    return created


def _quota_dicts(department: Department) -> list[dict]:
    return [
        {
            "cluster": q.pool.cluster.name,
            "gpu_type": q.pool.gpu_type,
            "nominal": q.nominal,
            "borrowing_limit": q.borrowing_limit,
            "lending_limit": q.lending_limit,
        }
        for q in Quota.objects.filter(department=department).select_related("pool__cluster")
    ]


# --- Department administration: members, priority classes, storage ------------------


def priority_class_create(*, actor, name: str, value: int, preemptible: bool, description: str = "") -> PriorityClass:
    """A new priority class (platform admins)."""
    require_platform_admin(actor)
    if PriorityClass.objects.filter(name=name).exists():
        raise InvalidInput({"name": [_("There is already a priority class called %(name)r.") % {"name": name}]})
    return _priority_class_save(
        actor=actor, priority=PriorityClass(name=name), value=value, preemptible=preemptible, description=description
    )


def priority_class_update(
    *, actor, priority: PriorityClass, value: int, preemptible: bool, description: str = ""
) -> PriorityClass:
    """Change a priority class (platform admins); its name stays, jobs and clients refer to it. Queues re-order at once."""
    return _priority_class_save(
        actor=actor, priority=priority, value=value, preemptible=preemptible, description=description
    )


def _priority_class_save(
    *, actor, priority: PriorityClass, value: int, preemptible: bool, description: str
) -> PriorityClass:
    require_platform_admin(actor)
    before = _priority_dict(priority) if priority.pk else None
    priority.value, priority.preemptible, priority.description = value, preemptible, description
    with transaction.atomic():
        _full_clean(priority)
        priority.save()
        audit_record(
            actor=actor,
            action="priority_class.update" if before else "priority_class.create",
            target=priority.name,
            data={"before": before, "after": _priority_dict(priority)},
        )
    signals.capacity_changed.send(sender=PriorityClass)
    return priority


def _priority_dict(priority: PriorityClass) -> dict:
    return {"value": priority.value, "preemptible": priority.preemptible, "description": priority.description}


def _full_clean(instance) -> None:
    try:
        instance.full_clean()
    except ValidationError as exc:
        raise InvalidInput(
            {
                ("non_field_errors" if field == NON_FIELD_ERRORS else field): messages
                for field, messages in exc.message_dict.items()
            }
        ) from exc


# --- Admission -----------------------------------------------------------------


# SQLite: settings open every transaction with BEGIN IMMEDIATE, which
# already lets a single writer in at a time.
