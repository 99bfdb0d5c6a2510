"""Reads of jobs: what a user may see, and what a job logged."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Q, QuerySet

from accounts import permissions
from jobs import lifecycle
from jobs.models import Job, JobEvent


def jobs_for(
    *, user, department: str = "", status: str = "", submitted_by: str = "", search: str = ""
) -> QuerySet[Job]:
    jobs = permissions.scope(
        user, Job.objects.select_related("department", "cluster", "pool", "image", "priority", "submitted_by")
    )
    if department:
        jobs = jobs.filter(department__slug=department)
    if status:
        jobs = jobs.filter(status__in=status.split(","))
    if submitted_by:
        jobs = jobs.filter(submitted_by__username=submitted_by)
    if search:
        jobs = jobs.filter(Q(name__icontains=search) | Q(command__icontains=search) | Q(code_url__icontains=search))
    return jobs


def queue_for(*, user, cluster: str = "", gpu_type: str = "") -> QuerySet[Job]:
    jobs = jobs_for(user=user, status=lifecycle.QUEUED)
    if cluster:
        jobs = jobs.filter(cluster__name=cluster)
    if gpu_type:
        jobs = jobs.filter(pool__gpu_type=gpu_type)
    return jobs.order_by("pool_id", "queue_position", "created_at")


def job_get(*, user, job_id: int) -> Job | None:
    """The job if the user may see it; None otherwise (answered as 404 alike)."""
    return jobs_for(user=user).filter(pk=job_id).first()


def job_events(*, job: Job) -> QuerySet[JobEvent]:
    return job.events.all()


@dataclass(frozen=True)
class GpuSlice:
    """A job's share of one GPU; ``job`` is None when the job belongs to a department the user may not see."""

    fraction: float
    job: Job | None


@dataclass(frozen=True)
class GpuCell:
    index: int
    slices: tuple[GpuSlice, ...]


def gpu_map(*, user, cluster) -> dict[int, list[tuple[str, list[GpuCell]]]]:
    """pool id -> [(node, [GpuCell per GPU index])]: which job (of which department) holds each GPU of the cluster."""
    held: dict[tuple[int, str, int], list[GpuSlice]] = defaultdict(list)
    holding = Job.objects.filter(cluster=cluster, status__in=lifecycle.HOLDS_GPUS).select_related(
        "department", "submitted_by"
    )
    for job in holding:
        shown = job if permissions.can_view(user, job) else None
        for slot in job.placement:
            for gpu in slot["gpus"]:
                held[(job.pool_id, slot["node"], gpu)].append(
                    GpuSlice(fraction=slot.get("gpu_fraction") or 1.0, job=shown)
                )
    return {
        pool.pk: [
            (node, [GpuCell(index=gpu, slices=tuple(held[(pool.pk, node, gpu)])) for gpu in range(pool.gpus_per_node)])
            for node in pool.node_names
        ]
        for pool in cluster.pools.all()
    }
