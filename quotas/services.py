"""Writes to tenancy and capacity: quotas, members, priority classes, the audit trail,
and admission (the scheduling cycle). Storage volumes: quotas.storage."""

from __future__ import annotations

import math
import secrets
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.db import connection, transaction
from django.db.models import Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from config.celery import app as celery_app
from config.errors import InvalidInput
from jobs import lifecycle, live
from jobs.models import Job
from jobs.transitions import job_transition
from quotas import permissions
from quotas.clusters import quota_isolation_refusal, setup_timeout_seconds
from quotas.models import AuditEvent, Department, GpuPool, Membership, PriorityClass, Quota
from quotas.scheduler import (
    Admission, Decisions, PendingJob, PoolState, Preemption, QuotaState, RunningJob, Slot, Snapshot, schedule,
)
from quotas.scheduler.eta import expected_end


def audit_record(*, actor, action: str, target: str, department: Department | None = None, data: dict | None = None) -> AuditEvent:
    return AuditEvent.objects.create(actor=actor, action=action, target=target, department=department, data=data or {})


def _check_quotas(*, department: Department, quotas: list[dict], lock: bool) -> dict[tuple[str, str], GpuPool]:
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
            item_errors[index]["gpu_type"] = [f"{item['cluster']}/{item['gpu_type']} is listed twice; give one quota per pool."]
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
        Quota.objects.filter(pool_id__in=wanted).exclude(department=department).values("pool_id")
        .annotate(total=Sum("nominal")).values_list("pool_id", "total")
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
        pools = _check_quotas(department=department, quotas=quotas, lock=True)
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
    scheduling_cycle()  # a larger quota may admit waiting jobs at once
    return created


def quota_preview(*, department: Department, quotas: list[dict]) -> Decisions:
    """What one scheduling cycle would do if the department had these quotas. Changes nothing."""
    pools = _check_quotas(department=department, quotas=quotas, lock=False)
    proposed = [
        QuotaState(department=department.slug, pool_id=pools[(i["cluster"], i["gpu_type"])].pk, nominal=i["nominal"],
                   borrowing_limit=i.get("borrowing_limit"), lending_limit=i.get("lending_limit"))
        for i in quotas
    ]
    others = [
        QuotaState(department=q.department.slug, pool_id=q.pool_id, nominal=q.nominal, borrowing_limit=q.borrowing_limit,
                   lending_limit=q.lending_limit)
        for q in Quota.objects.exclude(department=department).select_related("department")
    ]
    queued = list(Job.objects.filter(status=lifecycle.QUEUED).select_related("pool__cluster", "priority", "department"))
    if not queued:
        return Decisions()
    snapshot, _ = cycle_snapshot(queued=queued, quotas=proposed + others)
    return schedule(snapshot, now=timezone.now().timestamp())


def _quota_dicts(department: Department) -> list[dict]:
    return [
        {
            "cluster": q.pool.cluster.name, "gpu_type": q.pool.gpu_type, "nominal": q.nominal,
            "borrowing_limit": q.borrowing_limit, "lending_limit": q.lending_limit,
        }
        for q in Quota.objects.filter(department=department).select_related("pool__cluster")
    ]


# --- Department administration: members, priority classes, storage ------------------

def _require_manager(actor, department: Department) -> None:
    if not permissions.can_manage(actor, department):
        raise PermissionDenied(_("Only admins of %(department)s can change it.") % {"department": department.slug})


def _require_platform_admin(actor) -> None:
    if not permissions.is_platform_admin(actor):
        raise PermissionDenied(_("Only platform admins can change priority classes."))


def _check_keeps_an_admin(*, actor, membership: Membership) -> None:
    """A department admin may not leave a department without one; platform admins may (they manage it anyway)."""
    if membership.role != Membership.Role.DEPT_ADMIN or permissions.is_platform_admin(actor):
        return
    admins = Membership.objects.select_for_update().filter(department_id=membership.department_id, role=Membership.Role.DEPT_ADMIN)
    if admins.exclude(pk=membership.pk).count() == 0:
        raise InvalidInput(
            _("%(user)s is the last department admin of %(department)s; make someone else admin first.")
            % {"user": membership.user.username, "department": membership.department.slug}
        )


def membership_set(*, actor, department: Department, username: str, role: str) -> Membership:
    """Add a user to a department with a role, or change their role there."""
    _require_manager(actor, department)
    if role not in Membership.Role.values:
        raise InvalidInput({"role": [_("Choose a role: %(roles)s.") % {"roles": ", ".join(Membership.Role.values)}]})
    user = get_user_model().objects.filter(username=username.strip(), is_active=True).first()
    if user is None:
        raise InvalidInput({"username": [_("No active user is called %(name)r.") % {"name": username.strip()}]})
    with transaction.atomic():
        membership = Membership.objects.select_for_update().filter(department=department, user=user).first()
        if membership is None:
            membership = Membership.objects.create(department=department, user=user, role=role)
            audit_record(actor=actor, action="membership.add", target=user.username, department=department,
                         data={"role": role})
        elif membership.role != role:
            if role != Membership.Role.DEPT_ADMIN:
                _check_keeps_an_admin(actor=actor, membership=membership)
            before, membership.role = membership.role, role
            membership.save(update_fields=["role"])
            audit_record(actor=actor, action="membership.role", target=user.username, department=department,
                         data={"before": before, "after": role})
    permissions.forget_roles(actor)
    return membership


def membership_remove(*, actor, membership: Membership) -> None:
    department = membership.department
    _require_manager(actor, department)
    with transaction.atomic():
        _check_keeps_an_admin(actor=actor, membership=membership)
        membership.delete()
        audit_record(actor=actor, action="membership.remove", target=membership.user.username, department=department,
                     data={"role": membership.role})
    permissions.forget_roles(actor)


def priority_class_create(*, actor, name: str, value: int, preemptible: bool, description: str = "") -> PriorityClass:
    """A new priority class (platform admins)."""
    _require_platform_admin(actor)
    if PriorityClass.objects.filter(name=name).exists():
        raise InvalidInput({"name": [_("There is already a priority class called %(name)r.") % {"name": name}]})
    return _priority_class_save(actor=actor, priority=PriorityClass(name=name), value=value, preemptible=preemptible,
                                description=description)


def priority_class_update(*, actor, priority: PriorityClass, value: int, preemptible: bool, description: str = "") -> PriorityClass:
    """Change a priority class (platform admins); its name stays, jobs and clients refer to it. Queues re-order at once."""
    return _priority_class_save(actor=actor, priority=priority, value=value, preemptible=preemptible, description=description)


def _priority_class_save(*, actor, priority: PriorityClass, value: int, preemptible: bool, description: str) -> PriorityClass:
    _require_platform_admin(actor)
    before = _priority_dict(priority) if priority.pk else None
    priority.value, priority.preemptible, priority.description = value, preemptible, description
    with transaction.atomic():
        _full_clean(priority)
        priority.save()
        audit_record(actor=actor, action="priority_class.update" if before else "priority_class.create", target=priority.name,
                     data={"before": before, "after": _priority_dict(priority)})
    scheduling_cycle()
    return priority


def _priority_dict(priority: PriorityClass) -> dict:
    return {"value": priority.value, "preemptible": priority.preemptible, "description": priority.description}


def _full_clean(instance) -> None:
    try:
        instance.full_clean()
    except ValidationError as exc:
        raise InvalidInput(
            {("non_field_errors" if field == NON_FIELD_ERRORS else field): messages for field, messages in exc.message_dict.items()}
        ) from exc


# --- Admission -----------------------------------------------------------------

ETA_TOLERANCE_SECONDS = 60
CYCLE_LOCK_KEY = 0x6770755F  # "gpu_": one scheduling cycle at a time across processes


def scheduling_cycle(*, now: datetime | None = None) -> Decisions:
    """Admit what fits, start preemptions, and tell every waiting job why and roughly when.

    The one way jobs get admitted. Runs in one transaction under a
    cross-process lock, and moves each job with a conditional update, so
    concurrent cycles and submissions cannot over-admit. Launching and
    stopping happen after commit, in the worker.
    """
    now = now or timezone.now()
    with transaction.atomic():
        _lock_cycle()
        queued = {
            job.pk: job
            for job in Job.objects.filter(status=lifecycle.QUEUED).select_related("pool__cluster", "priority", "department")
        }
        if not queued:
            return Decisions()
        snapshot, holding = cycle_snapshot(queued=list(queued.values()))
        decisions = schedule(snapshot, now=now.timestamp())
        for admission in decisions.admissions:
            _admit(queued[admission.job_id], admission, now)
        for preemption in decisions.preemptions:
            _preempt(holding[preemption.job_id], preemption, now)
        moved = []
        for waiting in decisions.waiting:
            job = queued[waiting.job_id]
            eta = datetime.fromtimestamp(waiting.estimated_start, tz=UTC) if waiting.estimated_start else None
            if (job.pending_reason, job.status_message, job.queue_position) != (
                waiting.reason, waiting.message, waiting.position
            ) or _moved(job.estimated_start, eta):
                if Job.objects.filter(pk=job.pk, status=lifecycle.QUEUED).update(
                    pending_reason=waiting.reason, status_message=waiting.message, queue_position=waiting.position,
                    estimated_start=eta,
                ):
                    job.pending_reason, job.status_message = waiting.reason, waiting.message
                    job.queue_position, job.estimated_start = waiting.position, eta
                    moved.append(job)
        # No transition tells their departments' open pages about these: say it once per department.
        live.queue_changed(jobs=moved)
    return decisions


def _moved(before: datetime | None, after: datetime | None) -> bool:
    """An estimate is rewritten only when it moves by more than a minute, not on every cycle's new "now"."""
    if before is None or after is None:
        return before != after
    return abs((after - before).total_seconds()) > ETA_TOLERANCE_SECONDS


def _lock_cycle() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CYCLE_LOCK_KEY])
    # SQLite: settings open every transaction with BEGIN IMMEDIATE, which
    # already lets a single writer in at a time.


def _recent_usage(pools, now: datetime | None = None) -> dict[tuple[str, int], float]:
    """(department, pool) -> GPUs used on average lately, each finished run's GPU-seconds decayed by its age.

    Only for pools whose cluster weighs it in fair share (setting ``fair_share_usage_weight``; the
    half-life is ``fair_share_half_life_hours``, default 24). Runs still going count through the
    GPUs they hold now, their earlier runs here.
    """
    now = now or timezone.now()
    recent: dict[tuple[str, int], float] = defaultdict(float)
    for pool in pools:
        settings = pool.cluster.settings
        if not float(settings.get("fair_share_usage_weight", 0)):
            continue
        half_life = float(settings.get("fair_share_half_life_hours", 24)) * 3600
        since = now - timedelta(seconds=8 * half_life)  # older runs weigh less than 0.4%
        rows = Job.objects.filter(pool=pool, gpu_seconds__gt=0).filter(
            Q(finished_at__gte=since) | Q(finished_at__isnull=True)
        ).values_list("department__slug", "gpu_seconds", "finished_at")
        for department, gpu_seconds, finished in rows:
            age = max(0.0, (now - (finished or now)).total_seconds())
            # a GPU-second that long ago, spread over the mean life of the decay (half-life / ln 2)
            recent[(department, pool.pk)] += gpu_seconds * 0.5 ** (age / half_life) * math.log(2) / half_life
    return recent


def cycle_snapshot(*, queued: list[Job], quotas: list[QuotaState] | None = None) -> tuple[Snapshot, dict[int, Job]]:
    """What the scheduler sees of the pools the queued jobs wait for; ``quotas`` replaces the stored ones (what-if)."""
    pools = {job.pool_id: job.pool for job in queued}
    holding = {
        job.pk: job
        for job in Job.objects.filter(status__in=lifecycle.HOLDS_GPUS, pool_id__in=list(pools))
        .select_related("priority", "department")
    }
    used: dict[int, dict[tuple[str, int], float]] = {pool_id: defaultdict(float) for pool_id in pools}
    running = []
    for job in holding.values():
        slots = tuple(
            Slot(worker=s["worker"], node=s["node"], gpus=tuple(s["gpus"]), fraction=s.get("gpu_fraction"))
            for s in job.placement
        )
        for slot in slots:
            for gpu in slot.gpus:
                used[job.pool_id][(slot.node, gpu)] += slot.fraction or 1.0
        started = (job.admitted_at or job.created_at).timestamp()
        running.append(RunningJob(
            job_id=job.pk, pool_id=job.pool_id, department=job.department.slug, priority=job.priority.value,
            preemptible=job.priority.preemptible, gpus=job.gpus, slots=slots, started_at=started,
            deadline=expected_end(
                admitted_at=started, running_since=job.started_at.timestamp() if job.started_at else None,
                max_runtime=job.max_runtime_seconds, setup_seconds=setup_timeout_seconds(pools[job.pool_id].cluster),
            ),
            terminating=bool(job.cancel_requested_at or job.preempt_requested_at),
            attained=job.gpu_seconds,  # earlier runs; this one counts from started_at
            checkpoint_every=float(pools[job.pool_id].cluster.settings.get("checkpoint_seconds", 0)) or None,
        ))
    if quotas is None:
        recent = _recent_usage(pools.values())
        quotas = [
            QuotaState(department=q.department.slug, pool_id=q.pool_id, nominal=q.nominal,
                       borrowing_limit=q.borrowing_limit, lending_limit=q.lending_limit,
                       recent_usage=recent.get((q.department.slug, q.pool_id), 0.0))
            for q in Quota.objects.filter(pool_id__in=list(pools)).select_related("department")
        ]
    snapshot = Snapshot(
        pools={
            pool.pk: PoolState(
                pool_id=pool.pk, name=str(pool), nodes=tuple(pool.node_names), gpus_per_node=pool.gpus_per_node,
                shareable=pool.shareable, used=dict(used[pool.pk]),
                min_runtime_seconds=float(pool.cluster.settings.get("min_runtime_seconds", 0)),
                usage_weight=float(pool.cluster.settings.get("fair_share_usage_weight", 0)),
            )
            for pool in pools.values()
        },
        pending=tuple(
            PendingJob(
                job_id=job.pk, pool_id=job.pool_id, department=job.department.slug, priority=job.priority.value,
                submitted_at=job.created_at.timestamp(), workers=job.workers, gpus_per_worker=job.gpus_per_worker,
                preemptible=job.priority.preemptible, max_runtime=job.max_runtime_seconds,
                nominated=job.pending_reason == "preemption_in_progress", attained=job.gpu_seconds,
            )
            for job in queued
        ),
        running=tuple(running),
        quotas=tuple(quotas),
        fifo=dict(Department.objects.values_list("slug", "queueing")),
    )
    return snapshot, holding


def _preempt(job: Job, preemption: Preemption, now: datetime) -> None:
    """Ask a running job to stop for another; it is re-queued when it has stopped (jobs.services.job_observe)."""
    updated = Job.objects.filter(pk=job.pk, status__in=lifecycle.HOLDS_GPUS, preempt_requested_at__isnull=True).update(
        preempt_requested_at=now, preempt_reason=preemption.reason,
        status_message=f"{preemption.message} Workers get SIGTERM and the grace period, then it is queued again.",
    )
    if updated:
        job_id = job.pk
        transaction.on_commit(lambda: celery_app.send_task("jobs.tasks.cancel_job", args=[job_id]))


def _admit(job: Job, admission: Admission, now: datetime) -> None:
    placement = [
        {"worker": slot.worker, "node": slot.node, "gpus": list(slot.gpus), "gpu_fraction": slot.fraction}
        for slot in admission.slots
    ]
    where = ", ".join(
        f"worker {slot.worker} on {slot.node}" + (f" GPU {','.join(map(str, slot.gpus))}" if slot.gpus else "")
        + (f" ({slot.fraction:g} share)" if slot.fraction else "")
        for slot in admission.slots
    )
    job_transition(
        job=job, to=lifecycle.ADMITTED, reason="admitted", message=f"Admitted: {where}.", now=now,
        placement=placement, admitted_at=now, pending_reason="", status_message="", queue_position=None,
        run_id=f"{job.pk}-{secrets.token_hex(4)}", launched_at=None,
    )
    job_id = job.pk
    # By name: the tasks module sits above this one and imports it.
    transaction.on_commit(lambda: celery_app.send_task("jobs.tasks.launch_job", args=[job_id]))
