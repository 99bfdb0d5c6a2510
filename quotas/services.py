"""Writes to tenancy and capacity: quotas, the audit trail, and admission (the scheduling cycle)."""

from __future__ import annotations

import secrets
from collections import defaultdict
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from config.celery import app as celery_app
from config.errors import InvalidInput
from jobs import lifecycle
from jobs.models import Job
from jobs.transitions import job_transition
from quotas.models import AuditEvent, Department, GpuPool, Quota
from quotas.scheduler import Admission, Decisions, PendingJob, PoolState, Snapshot, schedule


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


# --- Admission -----------------------------------------------------------------

CYCLE_LOCK_KEY = 0x6770755F  # "gpu_": one scheduling cycle at a time across processes


def scheduling_cycle(*, now: datetime | None = None) -> Decisions:
    """Admit what fits, and tell every job left waiting why. The one way jobs get admitted.

    Runs in one transaction under a cross-process lock, and moves each job with
    a conditional update, so concurrent cycles and submissions cannot
    over-admit. Launching happens after commit, in the worker.
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
        pools = {job.pool_id: job.pool for job in queued.values()}
        decisions = schedule(_snapshot(pools, queued.values()), now=now.timestamp())
        for admission in decisions.admissions:
            _admit(queued[admission.job_id], admission, now)
        for waiting in decisions.waiting:
            job = queued[waiting.job_id]
            if (job.pending_reason, job.status_message, job.queue_position) != (waiting.reason, waiting.message, waiting.position):
                Job.objects.filter(pk=job.pk, status=lifecycle.QUEUED).update(
                    pending_reason=waiting.reason, status_message=waiting.message, queue_position=waiting.position
                )
    return decisions


def _lock_cycle() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CYCLE_LOCK_KEY])
    # SQLite: settings open every transaction with BEGIN IMMEDIATE, which
    # already lets a single writer in at a time.


def _snapshot(pools: dict[int, GpuPool], queued) -> Snapshot:
    used: dict[int, dict[tuple[str, int], float]] = {pool_id: defaultdict(float) for pool_id in pools}
    holding = Job.objects.filter(status__in=lifecycle.HOLDS_GPUS, pool_id__in=list(pools)).values_list("pool_id", "placement")
    for pool_id, placement in holding:
        for slot in placement:
            for gpu in slot["gpus"]:
                used[pool_id][(slot["node"], gpu)] += slot.get("gpu_fraction") or 1.0
    return Snapshot(
        pools={
            pool.pk: PoolState(
                pool_id=pool.pk, name=str(pool), nodes=tuple(pool.node_names), gpus_per_node=pool.gpus_per_node,
                shareable=pool.shareable, used=dict(used[pool.pk]),
            )
            for pool in pools.values()
        },
        pending=tuple(
            PendingJob(
                job_id=job.pk, pool_id=job.pool_id, department=job.department.slug, priority=job.priority.value,
                submitted_at=job.created_at.timestamp(), workers=job.workers, gpus_per_worker=job.gpus_per_worker,
            )
            for job in queued
        ),
    )


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
