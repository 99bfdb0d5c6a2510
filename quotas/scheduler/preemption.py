"""Choosing whom to evict so that a waiting job can run.

- reclaim: a job that fits within its department's nominal takes GPUs back
  from departments that borrow, evicting only their preemptible workloads and
  only while such a department is still over its nominal (as Kueue does);
- priority: a job may evict lower-priority preemptible workloads of its own
  department;
- service (least attained service, ``ServicePolicy``): a job may evict a
  workload of no higher priority that has had far more GPU-seconds of service,
  if that workload's department stays at or above its nominal without it (or
  is the job's own): borrowed GPUs go round so that short jobs do not queue
  behind long ones, and guarantees are never touched.
Reclaim and priority victims are tried lowest priority first, most recently
started first; service victims most service first. The set is then trimmed to
the fewest that still make room. Non-preemptible workloads, and those younger
than the minimum runtime, are never chosen.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from quotas.scheduler.ledger import Ledger
from quotas.scheduler.placement import Occupancy
from quotas.scheduler.types import PendingJob, RunningJob

# How many eviction candidates one waiting job may look at in a cycle: past this many, evicting is
# unlikely to be the fewest-victims answer, and the job tries again next cycle.
SEARCH_LIMIT = 64


def fits(ledger: Ledger, occupancy: Occupancy, job: PendingJob) -> bool:
    return ledger.refusal(job.department, job.gpus, may_borrow=job.preemptible) is None and occupancy.fits(
        job.workers, job.gpus_per_worker
    )


def find_victims(
    job: PendingJob,
    ledger: Ledger,
    occupancy: Occupancy,
    evictable: list[RunningJob],
    by_service: Sequence[tuple[float, RunningJob]] = (),
    service_floor: float = float("inf"),
) -> list[tuple[RunningJob, str]] | None:
    """The fewest (victim, reason) pairs whose eviction lets ``job`` in, or None if no eviction can.

    ``evictable``: preemptible, old-enough workloads not already stopping, in eviction order.
    ``by_service``: (GPU-seconds of service, workload) of those that ran long enough in this run to
    be evicted for less-served jobs, most service first; only those with at least ``service_floor``
    are candidates.
    """
    candidates = _candidates(job, ledger.within_nominal(job.department, job.gpus), evictable, by_service, service_floor)
    removed: list[tuple[RunningJob, str]] = []
    seen: set[int] = set()
    enough = False
    try:
        for victim, reason in itertools.islice(candidates, SEARCH_LIMIT):
            if victim.job_id in seen:
                continue
            if reason == "reclaim" and ledger.borrowed(victim.department) <= 1e-9:
                continue  # that department is back within its nominal: the rest of its jobs are guaranteed
            if (
                reason == "service"
                and victim.department != job.department
                and ledger.usage[victim.department] - victim.gpus < ledger.nominal(victim.department) - 1e-9
            ):
                continue  # it would take that department below its guarantee
            seen.add(victim.job_id)
            occupancy.release(victim.slots)
            ledger.remove(victim.department, victim.gpus)
            removed.append((victim, reason))
            if fits(ledger, occupancy, job):
                enough = True
                break
    finally:
        for victim, _ in removed:  # leave the ledger and occupancy as they were
            occupancy.retake(victim.slots)
            ledger.add(victim.department, victim.gpus)
    return _fewest(job, ledger, occupancy, removed) if enough else None


def _candidates(
    job: PendingJob,
    within: bool,
    evictable: list[RunningJob],
    by_service: Sequence[tuple[float, RunningJob]],
    service_floor: float,
) -> Iterator[tuple[RunningJob, str]]:
    """Reclaim candidates (only for a job within its nominal), then priority, then service ones, lazily: a search
    stops at the first set that makes room."""
    if within:
        for run in evictable:
            if run.department != job.department:
                yield run, "reclaim"
    for run in evictable:
        if run.department == job.department and run.priority < job.priority:
            yield run, "priority"
    for service, run in by_service:
        if service < service_floor:
            return
        if run.priority <= job.priority:
            yield run, "service"


def _fewest(
    job: PendingJob, ledger: Ledger, occupancy: Occupancy, chosen: list[tuple[RunningJob, str]]
) -> list[tuple[RunningJob, str]]:
    """Give victims back, last chosen first, while the job still fits without them (one pass, no copies)."""
    for victim, _ in chosen:
        occupancy.release(victim.slots)
        ledger.remove(victim.department, victim.gpus)
    kept = []
    for pair in reversed(chosen):
        victim = pair[0]
        occupancy.retake(victim.slots)
        ledger.add(victim.department, victim.gpus)
        if not fits(ledger, occupancy, job):
            occupancy.release(victim.slots)  # still needed
            ledger.remove(victim.department, victim.gpus)
            kept.append(pair)
    for victim, _ in kept:
        occupancy.retake(victim.slots)
        ledger.add(victim.department, victim.gpus)
    return kept[::-1]
