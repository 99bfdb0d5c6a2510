"""One scheduling cycle (Kueue's shape): snapshot -> heads -> order -> admit / preempt -> reasons.

Per pool, departments take turns by fair share: the one using the smallest
fraction of its nominal quota goes next, with its best job (priority, then
submit time). A job is admitted whole (all workers placed) if its department's
quota allows it (ledger) and the GPUs are there (placement). If not:
- within nominal, it reclaims borrowed GPUs or evicts lower-priority jobs of its
  own department (preemption), and waits for them to stop;
- otherwise it waits with a reason naming the numbers. In strict FIFO the rest
  of its department waits behind it; in best-effort FIFO (the default) smaller
  jobs behind it may run if they do not delay its estimated start.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import replace

from quotas.scheduler.eta import earliest_start, estimate_starts
from quotas.scheduler.ledger import Ledger
from quotas.scheduler.placement import place_gang
from quotas.scheduler.preemption import find_victims, fits, release
from quotas.scheduler.types import (
    STRICT_FIFO, Admission, Decisions, PendingJob, PoolState, Preemption, RunningJob, Snapshot, Waiting,
)


def schedule(snapshot: Snapshot, *, now: float) -> Decisions:
    decisions = Decisions()
    pending: dict[int, list[PendingJob]] = defaultdict(list)
    running: dict[int, list[RunningJob]] = defaultdict(list)
    for job in snapshot.pending:
        pending[job.pool_id].append(job)
    for job in snapshot.running:
        running[job.pool_id].append(job)
    for pool_id, jobs in pending.items():
        _Cycle(snapshot, snapshot.pools[pool_id], jobs, running[pool_id], now, decisions).run()
    return decisions


class _Cycle:
    def __init__(self, snapshot: Snapshot, pool: PoolState, pending, running, now: float, decisions: Decisions):
        self.pool, self.now, self.decisions, self.snapshot = pool, now, decisions, snapshot
        self.running = list(running)
        usage: dict[str, float] = defaultdict(float)
        for job in running:
            usage[job.department] += job.gpus
        self.ledger = Ledger(pool, [q for q in snapshot.quotas if q.pool_id == pool.pool_id], usage)
        self.used = dict(pool.used)
        self.intervals = [(now, job.deadline or math.inf, job.gpus) for job in running]
        queues: dict[str, list[PendingJob]] = defaultdict(list)
        for job in pending:
            queues[job.department].append(job)
        self.by_id = {job.job_id: job for job in pending}
        self.queues = {d: deque(sorted(q, key=lambda j: (-j.priority, j.submitted_at, j.job_id))) for d, q in queues.items()}
        self.waiting: list[Waiting] = []
        self.heads: dict[str, tuple[PendingJob, float | None]] = {}  # department -> blocked head, its shadow time

    def run(self) -> None:
        while True:
            live = [d for d, q in self.queues.items() if q]
            if not live:
                break
            department = min(live, key=lambda d: (self.ledger.share(d), -self.queues[d][0].priority, self.queues[d][0].submitted_at))
            job = self.queues[department].popleft()
            if department in self.heads:
                self._behind_blocked_head(job)
            else:
                self._try(job)
        estimates = estimate_starts(self.intervals, [self.by_id[w.job_id] for w in self.waiting], self.pool.total, self.now)
        for position, waiting in enumerate(self.waiting, start=1):
            self.decisions.waiting.append(
                Waiting(job_id=waiting.job_id, reason=waiting.reason, message=waiting.message, position=position,
                        estimated_start=estimates.get(waiting.job_id))
            )

    def _admit_if_fits(self, job: PendingJob) -> bool:
        if self.ledger.check(job.department, job.gpus) is not None:
            return False
        slots = place_gang(self.pool, self.used, job.workers, job.gpus_per_worker)
        if slots is None:
            return False
        borrowed = max(0.0, self.ledger.usage[job.department] + job.gpus - self.ledger.nominal(job.department))
        self.ledger.add(job.department, job.gpus)
        end = self.now + job.max_runtime if job.max_runtime else math.inf
        self.intervals.append((self.now, end, job.gpus))
        self.decisions.admissions.append(Admission(job_id=job.job_id, slots=tuple(slots), borrowed=min(borrowed, job.gpus)))
        return True

    def _try(self, job: PendingJob) -> None:
        if self._admit_if_fits(job):
            return
        reason, message = self._make_room(job, *self._why(job))
        self.waiting.append(Waiting(job_id=job.job_id, reason=reason, message=message, position=0))
        shadow = earliest_start(self.intervals, job.gpus, self.pool.total, self.now)
        self.heads[job.department] = (job, shadow if reason not in ("borrowing_limit", "quota_exhausted") else None)

    def _behind_blocked_head(self, job: PendingJob) -> None:
        head, shadow = self.heads[job.department]
        strict = self.snapshot.fifo.get(job.department) == STRICT_FIFO
        if not strict and shadow is not None and self._backfill_safe(job, head, shadow) and self._admit_if_fits(job):
            return
        self.waiting.append(Waiting(
            job_id=job.job_id, reason="lower_in_queue", position=0,
            message=f"Waiting behind job #{head.job_id}, first in {job.department}'s {self.pool.name} queue"
                    + (" (strict FIFO)." if strict else "; running it now would delay that job."),
        ))

    def _backfill_safe(self, job: PendingJob, head: PendingJob, shadow: float) -> bool:
        """EASY backfilling: done before the head's estimated start, or using GPUs the head will not need then."""
        if job.max_runtime and self.now + job.max_runtime <= shadow:
            return True
        at_shadow = sum(g for s, e, g in self.intervals if s <= shadow < e)
        return at_shadow + job.gpus + head.gpus <= self.pool.total + 1e-9

    def _why(self, job: PendingJob) -> tuple[str, str]:
        refused = self.ledger.check(job.department, job.gpus)
        if refused:
            return refused
        free = self.pool.total - sum(self.used.values())
        shape = f"{job.workers} worker{'s' if job.workers > 1 else ''} x {job.gpus_per_worker:g} GPU"
        if job.gpus > free + 1e-9:
            borrowers = ", ".join(f"{d} borrows {self.ledger.borrowed(d):g}" for d in sorted(self.ledger.usage)
                                  if d != job.department and self.ledger.borrowed(d) > 0)
            return "no_capacity", (f"Needs {job.gpus:g} GPUs ({shape}); {free:g} of {self.pool.total} {self.pool.name} "
                                   f"GPUs are free" + (f" ({borrowers})." if borrowers else "."))
        return "gang_does_not_fit", (
            f"Needs {job.gpus:g} GPUs ({shape}); {free:g} of {self.pool.total} {self.pool.name} GPUs are free but not "
            "in a shape that holds every worker (each worker needs its GPUs on one node)."
        )

    def _make_room(self, job: PendingJob, reason: str, message: str) -> tuple[str, str]:
        stopping = [r for r in self.running if r.terminating]
        if stopping:
            trial_used, trial = dict(self.used), Ledger(self.pool, list(self.ledger.quota.values()), dict(self.ledger.usage))
            for r in stopping:
                release(trial_used, r)
                trial.remove(r.department, r.gpus)
            if fits(self.pool, trial, trial_used, job):
                ids = ", ".join(f"#{r.job_id}" for r in stopping)
                return "preemption_in_progress", f"Waiting for {ids} to stop (grace period); then it starts. {message}"
        victims = find_victims(job, self.pool, self.ledger, self.used, [r for r in self.running if not r.terminating],
                               now=self.now, min_runtime=self.pool.min_runtime_seconds)
        if not victims:
            return reason, message
        names = []
        for victim, why in victims:
            what = (f"{victim.department} borrows GPUs that {job.department}'s nominal guarantees" if why == "reclaim"
                    else f"it has lower priority than #{job.job_id}")
            self.decisions.preemptions.append(Preemption(job_id=victim.job_id, reason=why, for_job=job.job_id,
                                                          message=f"Preempted for job #{job.job_id}: {what}."))
            self.running = [replace(r, terminating=True) if r.job_id == victim.job_id else r for r in self.running]
            names.append(f"#{victim.job_id} ({victim.department}, {why})")
        return "preemption_in_progress", f"Preempting {', '.join(names)} to make room; it starts when they stop."
