"""Writes to tenancy and capacity: quotas, members, priority classes, the audit trail,
and admission (the scheduling cycle). Storage volumes: clusters.storage."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Sum
from django.utils import formats, timezone
from django.utils.translation import gettext as _

from accounts import permissions
from accounts.models import Department
from accounts.services import audit_record, require_platform_admin
from clusters.models import GpuPool
from core.errors import Conflict, InvalidInput
from quotas import selectors, signals
from quotas.isolation import quota_isolation_refusal
from quotas.models import PriorityClass, Quota, QuotaLoan


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
    lent = dict(
        selectors.loans_active()
        .filter(from_department=department, pool_id__in=wanted)
        .values("pool_id")
        .annotate(total=Sum("gpus"))
        .values_list("pool_id", "total")
    )
    for index, item in enumerate(quotas):
        pool = pools.get((item["cluster"], item["gpu_type"]))
        if pool is None or {"cluster", "gpu_type"} & set(item_errors[index]):
            continue
        if item["nominal"] < lent.get(pool.pk, 0):
            item_errors[index]["nominal"] = [
                _(
                    "%(department)s lends %(gpus)d GPUs of %(pool)s right now: keep its nominal at least %(gpus)d, "
                    "or end those loans first."
                )
                % {"department": department.slug, "gpus": lent[pool.pk], "pool": pool}
            ]
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


# --- Quota loans ------------------------------------------------------------------


def loan_max_days() -> int:
    return int(getattr(settings, "PORTAL_QUOTA_LOAN_MAX_DAYS", 90))


def loan_create(
    *,
    actor,
    from_department: Department,
    to_department: str,
    cluster: str,
    gpu_type: str,
    gpus: int | None,
    until: datetime | None,
    now: datetime | None = None,
    type_errors: dict | None = None,
) -> QuotaLoan:
    """Lend ``gpus`` GPUs of a pool from a department to another until a time (the lender's dept_admins and
    platform admins). Every problem at once, per field (InvalidInput); a member of the lender gets 403.

    Never lends more than the lender has, even when two admins lend at once: the pool's row is locked
    (SELECT ... FOR UPDATE on PostgreSQL, the same lock quota_set takes; SQLite lets one writer in at a time,
    settings open every transaction with BEGIN IMMEDIATE) before the GPUs already lent are counted, so a
    second loan counts the first one.
    """
    now = now or timezone.now()
    if not permissions.can_manage(actor, from_department):
        raise PermissionDenied(
            _("Only admins of %(department)s can lend its GPUs.") % {"department": from_department.slug}
        )
    errors: dict[str, list] = dict(type_errors or {})
    borrower = Department.objects.filter(slug=to_department).first() if to_department else None
    if to_department and borrower is None and "to_department" not in errors:
        errors["to_department"] = [_("No department called %(slug)r.") % {"slug": to_department}]
    elif borrower is not None and borrower.pk == from_department.pk:
        errors["to_department"] = [_("A department cannot lend to itself: choose another department.")]
    pool = (
        GpuPool.objects.select_related("cluster").filter(cluster__name=cluster, gpu_type=gpu_type).first()
        if cluster and gpu_type
        else None
    )
    if cluster and gpu_type and pool is None and not {"cluster", "gpu_type"} & set(errors):
        types = sorted(GpuPool.objects.filter(cluster__name=cluster).values_list("gpu_type", flat=True))
        if types:
            errors["gpu_type"] = [
                _("Cluster %(cluster)r has no %(gpu_type)r GPUs; it has: %(types)s.")
                % {"cluster": cluster, "gpu_type": gpu_type, "types": ", ".join(types)}
            ]
        else:
            errors["cluster"] = [_("No cluster named %(cluster)r.") % {"cluster": cluster}]
    if until is not None and "until" not in errors:
        latest = now + timedelta(days=loan_max_days())
        if until <= now:
            errors["until"] = [_("The loan would end before it starts: pick a time in the future.")]
        elif until > latest:
            errors["until"] = [
                _("A loan lasts at most %(days)d days: pick a time before %(latest)s.")
                % {
                    "days": loan_max_days(),
                    "latest": formats.date_format(timezone.localtime(latest), "DATETIME_FORMAT"),
                }
            ]
    with transaction.atomic():
        if pool is not None:
            GpuPool.objects.select_for_update().filter(pk=pool.pk).first()  # see the docstring
            own = Quota.objects.filter(department=from_department, pool=pool).first()
            if own is None:
                errors.setdefault("gpu_type", []).append(
                    _("%(department)s has no quota on %(pool)s to lend.")
                    % {"department": from_department.slug, "pool": pool}
                )
            elif gpus is not None and "gpus" not in errors:
                lent = selectors.loans_lent(department=from_department, pool=pool, now=now)
                if gpus > own.nominal - lent:
                    errors["gpus"] = [
                        _(
                            "%(department)s has a nominal quota of %(nominal)d GPUs on %(pool)s and already lends "
                            "%(lent)d: at most %(free)d can be lent."
                        )
                        % {
                            "department": from_department.slug,
                            "nominal": own.nominal,
                            "pool": pool,
                            "lent": lent,
                            "free": max(0, own.nominal - lent),
                        }
                    ]
            if (
                borrower is not None
                and "to_department" not in errors
                and not Quota.objects.filter(department=borrower, pool=pool).exists()
            ):
                errors["to_department"] = [
                    _(
                        "%(department)s has no quota on %(pool)s, so it cannot run jobs there: a platform admin "
                        "gives it one first (a nominal of 0 is enough)."
                    )
                    % {"department": borrower.slug, "pool": pool}
                ]
        for field, value in (("to_department", borrower), ("gpu_type", pool), ("gpus", gpus), ("until", until)):
            if value is None and not errors:
                errors[field] = [_("This field is required.")]
        if errors or borrower is None or pool is None or gpus is None or until is None:
            raise InvalidInput(errors)
        loan = QuotaLoan.objects.create(
            from_department=from_department, to_department=borrower, pool=pool, gpus=gpus, until=until, created_by=actor
        )
        for department in (from_department, borrower):
            audit_record(
                actor=actor, action="loan.create", target=str(loan.pk), department=department, data=_loan_dict(loan)
            )
    signals.capacity_changed.send(sender=QuotaLoan)  # the borrower's waiting jobs may start now
    return loan


def loan_end(*, actor, loan: QuotaLoan, now: datetime | None = None) -> QuotaLoan:
    """End a loan before its time (the lender's dept_admins and platform admins): the GPUs go back at once,
    the borrower's jobs on them are taken back like a reclaim (with the grace period)."""
    now = now or timezone.now()
    if not permissions.can_manage(actor, loan.from_department):
        raise PermissionDenied(
            _("Only admins of %(department)s, which lends these GPUs, can end the loan.")
            % {"department": loan.from_department.slug}
        )
    with transaction.atomic():
        if not QuotaLoan.objects.filter(pk=loan.pk, ended_at__isnull=True, until__gt=now).update(
            ended_at=now, ended_by=actor, end_reason=QuotaLoan.EndReason.ENDED
        ):
            raise Conflict(_("This loan has already ended."))
        loan.refresh_from_db()
        for department in (loan.from_department, loan.to_department):
            audit_record(
                actor=actor, action="loan.end", target=str(loan.pk), department=department, data=_loan_dict(loan)
            )
    signals.capacity_changed.send(sender=QuotaLoan)  # the lender's waiting jobs may reclaim now
    return loan


def loans_expire(*, now: datetime | None = None) -> list[QuotaLoan]:
    """Mark the loans due by ``now`` expired, audit each, and run a scheduling cycle when any did. The quotas
    follow ``until`` on their own (effective_quotas reads only loans not yet due); this makes the cycle happen
    at that time, not at the next request, and records it. Beat calls it every few seconds (quotas.tasks,
    ``expire-quota-loans`` in CELERY_BEAT_SCHEDULE) rather than a task queued for ``until``: a task due months
    later would sit in a worker's memory and be redelivered by Redis after its visibility timeout."""
    now = now or timezone.now()
    expired = []
    with transaction.atomic():
        due = list(
            QuotaLoan.objects.filter(ended_at__isnull=True, until__lte=now).select_related(
                "from_department", "to_department", "pool__cluster"
            )
        )
        for loan in due:
            # Conditional: two beats, or a beat and an early end, never expire or end the same loan twice.
            if QuotaLoan.objects.filter(pk=loan.pk, ended_at__isnull=True).update(
                ended_at=loan.until, end_reason=QuotaLoan.EndReason.EXPIRED
            ):
                loan.ended_at, loan.end_reason = loan.until, QuotaLoan.EndReason.EXPIRED
                for department in (loan.from_department, loan.to_department):
                    audit_record(
                        actor=None,
                        action="loan.expire",
                        target=str(loan.pk),
                        department=department,
                        data=_loan_dict(loan),
                    )
                expired.append(loan)
    if expired:
        signals.capacity_changed.send(sender=QuotaLoan)  # the lenders' waiting jobs may reclaim now
    return expired


def _loan_dict(loan: QuotaLoan) -> dict:
    return {
        "from_department": loan.from_department.slug,
        "to_department": loan.to_department.slug,
        "cluster": loan.pool.cluster.name,
        "gpu_type": loan.pool.gpu_type,
        "gpus": loan.gpus,
        "until": loan.until.isoformat(),
        "end_reason": loan.end_reason,
    }


# --- Admission -----------------------------------------------------------------


# SQLite: settings open every transaction with BEGIN IMMEDIATE, which
# already lets a single writer in at a time.
