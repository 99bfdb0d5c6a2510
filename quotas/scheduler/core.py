"""One scheduling cycle.

For now: strict FIFO per pool by submit time, gang admission with placement,
and a reason for every job left waiting. Quotas, priorities, borrowing and
preemption come with the scheduler issue, inside this same function.
"""

from __future__ import annotations

from quotas.scheduler.placement import place_gang
from quotas.scheduler.types import Admission, Decisions, PendingJob, PoolState, Snapshot, Waiting


def schedule(snapshot: Snapshot, *, now: float) -> Decisions:
    decisions = Decisions()
    by_pool: dict[int, list[PendingJob]] = {}
    for job in sorted(snapshot.pending, key=lambda j: (j.submitted_at, j.job_id)):
        by_pool.setdefault(job.pool_id, []).append(job)
    for pool_id, queue in by_pool.items():
        pool = snapshot.pools[pool_id]
        used = dict(pool.used)
        blocker: PendingJob | None = None
        position = 0
        for job in queue:
            if blocker is None:
                slots = place_gang(pool, used, job.workers, job.gpus_per_worker)
                if slots is not None:
                    decisions.admissions.append(Admission(job_id=job.job_id, slots=tuple(slots)))
                    continue
                blocker = job
                position += 1
                decisions.waiting.append(_why_blocked(job, pool, used, position))
            else:
                position += 1
                decisions.waiting.append(
                    Waiting(
                        job_id=job.job_id, reason="lower_in_queue", position=position,
                        message=f"Waiting behind job #{blocker.job_id}, first in the {pool.name} queue (FIFO).",
                    )
                )
    return decisions


def _why_blocked(job: PendingJob, pool: PoolState, used: dict, position: int) -> Waiting:
    need = job.workers * job.gpus_per_worker
    free = pool.total - sum(used.values())
    shape = f"{job.workers} worker{'s' if job.workers > 1 else ''} x {job.gpus_per_worker:g} GPU"
    if need > free + 1e-9:
        return Waiting(
            job_id=job.job_id, reason="no_capacity", position=position,
            message=f"Needs {need:g} GPUs ({shape}); {free:g} of {pool.total} {pool.name} GPUs are free.",
        )
    return Waiting(
        job_id=job.job_id, reason="gang_does_not_fit", position=position,
        message=(
            f"Needs {need:g} GPUs ({shape}); {free:g} of {pool.total} {pool.name} GPUs are free "
            "but not in a shape that holds every worker (each worker needs its GPUs on one node)."
        ),
    )
