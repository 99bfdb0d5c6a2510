"""Choosing whom to evict so that a waiting job can run.

- reclaim: a job that fits within its department's nominal takes GPUs back
  from departments that borrow, evicting only their preemptible workloads and
  only while such a department is still over its nominal (as Kueue does);
- priority: a job may evict lower-priority preemptible workloads of its own
  department.
Victims are tried lowest priority first, most recently started first, and the
set is then trimmed to the fewest that still make room. Non-preemptible
workloads, and those younger than the minimum runtime, are never chosen.
"""

from __future__ import annotations

from quotas.scheduler.ledger import Ledger
from quotas.scheduler.placement import place_gang
from quotas.scheduler.types import PendingJob, PoolState, RunningJob


def release(used: dict, job: RunningJob) -> None:
    for slot in job.slots:
        for gpu in slot.gpus:
            key = (slot.node, gpu)
            used[key] = max(0.0, used.get(key, 0.0) - (slot.fraction or 1.0))
            if used[key] < 1e-9:
                del used[key]


def fits(pool: PoolState, ledger: Ledger, used: dict, job: PendingJob) -> bool:
    return ledger.check(job.department, job.gpus) is None and place_gang(pool, dict(used), job.workers, job.gpus_per_worker) is not None


def find_victims(
    job: PendingJob, pool: PoolState, ledger: Ledger, used: dict, running: list[RunningJob], *, now: float,
    min_runtime: float,
) -> list[tuple[RunningJob, str]] | None:
    """The fewest (victim, reason) pairs whose eviction lets ``job`` in, or None if no eviction can."""
    old_enough = [r for r in running if r.preemptible and not r.terminating and now - r.started_at >= min_runtime]
    order = lambda r: (r.priority, -r.started_at)  # noqa: E731
    candidates = []
    if ledger.within_nominal(job.department, job.gpus):
        candidates += [(r, "reclaim") for r in sorted(old_enough, key=order)
                       if r.department != job.department and ledger.borrowed(r.department) > 0]
    candidates += [(r, "priority") for r in sorted(old_enough, key=order)
                   if r.department == job.department and r.priority < job.priority]
    if not candidates:
        return None
    trial_used, trial = dict(used), _copy(ledger)
    chosen: list[tuple[RunningJob, str]] = []
    for victim, reason in candidates:
        if reason == "reclaim" and trial.borrowed(victim.department) <= 1e-9:
            continue  # that department is back within its nominal: the rest of its jobs are guaranteed
        release(trial_used, victim)
        trial.remove(victim.department, victim.gpus)
        chosen.append((victim, reason))
        if fits(pool, trial, trial_used, job):
            return _fewest(job, pool, ledger, used, chosen)
    return None


def _fewest(job, pool, ledger, used, chosen):
    """Drop victims, last chosen first, while the job still fits without them."""
    kept = list(chosen)
    for pair in reversed(chosen):
        rest = [p for p in kept if p is not pair]
        trial_used, trial = dict(used), _copy(ledger)
        for victim, _ in rest:
            release(trial_used, victim)
            trial.remove(victim.department, victim.gpus)
        if fits(pool, trial, trial_used, job):
            kept = rest
    return kept


def _copy(ledger: Ledger) -> Ledger:
    return Ledger(ledger.pool, list(ledger.quota.values()), dict(ledger.usage))
