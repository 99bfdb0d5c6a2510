"""One scheduling cycle (Kueue's shape): snapshot -> heads -> order -> admit / preempt -> reasons.

Per pool, departments take turns by fair share: the one using the smallest
fraction of its nominal quota goes next, with its best job (priority, then
submit time). A job is admitted whole (all workers placed) if its department's
quota allows it (ledger) and the GPUs are there (placement). If not:
- within nominal, it reclaims borrowed GPUs or evicts lower-priority jobs of its
  own department (preemption), and waits for them to stop;
- otherwise it waits with a reason naming the numbers. In strict FIFO the rest
  of its department waits behind it; in best-effort FIFO (the default) smaller
  jobs behind it may run if they do not delay its estimated start, and jobs
  within the department's nominal never wait behind a head that needs to
  borrow or whose start cannot be estimated.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from typing import Any

from quotas.scheduler.eta import Releases, estimate_starts
from quotas.scheduler.ledger import Ledger
from quotas.scheduler.moves import find_moves
from quotas.scheduler.placement import FULL, Occupancy, policy_for
from quotas.scheduler.preemption import find_victims
from quotas.scheduler.types import (
    GREEDY,
    STRICT_FIFO,
    Admission,
    Decisions,
    PendingJob,
    PoolState,
    Preemption,
    RunningJob,
    Snapshot,
    Waiting,
)


def schedule(snapshot: Snapshot, *, now: float) -> Decisions:
    decisions = Decisions()
    pending: dict[int, list[PendingJob]] = defaultdict(list)
    running: dict[int, list[RunningJob]] = defaultdict(list)
    for job in snapshot.pending:
        pending[job.pool_id].append(job)
    for run in snapshot.running:
        running[run.pool_id].append(run)
    for pool_id, jobs in pending.items():
        _Cycle(snapshot, snapshot.pools[pool_id], jobs, running[pool_id], now, decisions).run()
    return decisions


EVICTION_SEARCHES_PER_CYCLE = 64
MOVE_SEARCHES_PER_CYCLE = 8  # a move search looks at every node


class _Cycle:
    def __init__(
        self,
        snapshot: Snapshot,
        pool: PoolState,
        pending: list[PendingJob],
        running: list[RunningJob],
        now: float,
        decisions: Decisions,
    ):
        self.pool, self.now, self.decisions, self.snapshot = pool, now, decisions, snapshot
        self.stopping = [job for job in running if job.terminating]
        # the occupancy and the quota ledger once every stopping job is gone (made when needed)
        self.after_stop: Occupancy | None = None
        self.after_stop_ledger: Ledger | None = None
        self.running = [job for job in running if not job.terminating]
        # Who may be evicted, in eviction order, sorted once per cycle: lowest priority, then least work lost
        # (most recently started, or most recently checkpointed for jobs that declare their checkpoints).
        self.evictable = sorted(
            (
                job
                for job in running
                if job.preemptible and not job.terminating and now - job.started_at >= pool.min_runtime_seconds
            ),
            key=lambda job: (job.priority, job.unsaved(now)),
        )
        self.evictable_gpus: dict[str, float] = defaultdict(float)
        for job in self.evictable:
            self.evictable_gpus[job.department] += job.gpus
        # Least attained service: who has had the most GPU-seconds (and ran long enough this time) goes first.
        self.policy = policy = snapshot.service
        self.by_service: list[tuple[float, RunningJob]] = []
        self.service_gpus = 0.0  # an upper bound of what service evictions can free for a fresh job
        if policy.enabled:
            self.by_service = sorted(
                (
                    (job.service(now), job)
                    for job in self.evictable
                    if now - job.started_at >= policy.min_run_seconds
                    and (not job.checkpoint_every or job.unsaved(now) <= policy.max_unsaved_seconds)
                ),
                key=lambda pair: -pair[0],
            )
            fresh_floor = policy.factor * policy.quantum
            self.service_gpus = sum(job.gpus for service, job in self.by_service if service >= fresh_floor)
        usage: dict[str, float] = defaultdict(float)
        fixed: dict[str, float] = defaultdict(float)
        for job in running:
            usage[job.department] += job.gpus
            if not job.preemptible:
                fixed[job.department] += job.gpus
        self.ledger = Ledger(pool, [q for q in snapshot.quotas if q.pool_id == pool.pool_id], usage, fixed)
        self.occupancy = Occupancy(pool, policy_for(pool, pending, running))
        self.releases = Releases(float(pool.total), now)
        for job in running:
            self.releases.book(job.deadline, job.gpus)
        queues: dict[str, list[PendingJob]] = defaultdict(list)
        self.nominated: list[PendingJob] = []
        for waiting_job in pending:
            queues[waiting_job.department].append(waiting_job)
            if waiting_job.nominated:
                self.nominated.append(waiting_job)
        self.by_id = {job.job_id: job for job in pending}
        quantum = policy.quantum if policy.enabled else float("inf")
        self.queues = {
            d: deque(sorted(q, key=lambda j: (-j.priority, j.attained >= quantum, j.submitted_at, j.job_id)))
            for d, q in queues.items()
        }
        self.waiting: list[tuple[int, str, str]] = []  # job id, reason, message, in admission order
        # department -> [blocked head, its estimated start (shadow time), GPUs booked at that time]
        self.heads: dict[str, list[Any]] = {}
        self.head_reasons: dict[str, str] = {}
        self.reclaiming_for: PendingJob | None = None  # a guaranteed job GPUs are being freed for
        self._borrowers_at = -1
        self._borrowers_cache: list[tuple[str, float]] = []
        self._once_stopped: dict[tuple[Any, ...], bool] = {}
        self.on_node: dict[str, list[RunningJob]] | None = None
        # Eviction searches are the costly part of a cycle: this many per cycle, the rest try next cycle.
        self.searches_left, self.moves_left = EVICTION_SEARCHES_PER_CYCLE, MOVE_SEARCHES_PER_CYCLE

    def run(self) -> None:
        # Guaranteed ones first: GPUs freed for a borrower must not keep a guaranteed job waiting (they would
        # evict each other's department in turn, for ever).
        within = self.ledger.within_nominal
        for job in sorted(
            self.nominated, key=lambda j: (not within(j.department, j.gpus), -j.priority, j.submitted_at)
        ):
            self.queues[job.department].remove(job)
            guaranteed = within(job.department, job.gpus)
            if job.department in self.heads:
                self._behind_blocked_head(job)
            else:
                self._try(job)
            if guaranteed and self.reclaiming_for is None and self.waiting and self.waiting[-1][0] == job.job_id:
                # Still waiting for GPUs freed for it: nobody starts borrowing them meanwhile, or borrowers
                # would take them back in this very cycle and it would evict others next time, and so on.
                self.reclaiming_for = job
        # Departments take turns by fair share; only the one that just went changes its key.
        turns = [self._turn(d) for d in self.queues if self.queues[d]]
        heapq.heapify(turns)
        while turns:
            *_, department = heapq.heappop(turns)
            if department in self.heads and self.occupancy.free_units <= 0 and not self.snapshot.explain:
                # Nothing is free and nothing frees up within a cycle: the rest of this queue waits as it is
                # (positions then group by department, which a simulation does not need).
                self._all_behind_head(department)
                continue
            job = self.queues[department].popleft()
            if department in self.heads:
                self._behind_blocked_head(job)
            else:
                self._try(job)
            if self.queues[department]:
                heapq.heappush(turns, self._turn(department))
        if not self.snapshot.explain:
            self.decisions.waiting.extend(
                Waiting(job_id=job_id, reason=reason, message=message, position=position)
                for position, (job_id, reason, message) in enumerate(self.waiting, start=1)
            )
            return
        estimates = estimate_starts(self.releases, [self.by_id[job_id] for job_id, _, _ in self.waiting])
        self.decisions.waiting.extend(
            Waiting(
                job_id=job_id, reason=reason, message=message, position=position, estimated_start=estimates.get(job_id)
            )
            for position, (job_id, reason, message) in enumerate(self.waiting, start=1)
        )

    def _turn(self, department: str) -> tuple[Any, ...]:
        head = self.queues[department][0]
        return (self.ledger.share(department), -head.priority, head.submitted_at, department)

    def _admit_if_fits(self, job: PendingJob) -> bool:
        if job.gpus * FULL > self.occupancy.free_units + 1e-6:
            return False
        if self.reclaiming_for is not None and not self.ledger.within_nominal(job.department, job.gpus):
            return False
        if self.ledger.refusal(job.department, job.gpus, may_borrow=job.preemptible) is not None:
            return False
        slots = self.occupancy.place(job.workers, job.gpus_per_worker)
        if slots is None:
            return False
        borrowed = max(0.0, self.ledger.usage[job.department] + job.gpus - self.ledger.nominal(job.department))
        self.ledger.add(job.department, job.gpus, fixed=not job.preemptible)
        if self.after_stop is not None:
            self.after_stop.retake(slots)
            assert self.after_stop_ledger is not None  # made together with after_stop
            self.after_stop_ledger.add(job.department, job.gpus, fixed=not job.preemptible)
        end = self.now + job.max_runtime if job.max_runtime else None
        self.releases.book(end, job.gpus)
        for head in self.heads.values():  # what is booked at each blocked head's shadow time
            if head[1] is not None and (end is None or end > head[1]):
                head[2] += job.gpus
        self.decisions.admissions.append(
            Admission(job_id=job.job_id, slots=tuple(slots), borrowed=min(borrowed, job.gpus))
        )
        return True

    def _try(self, job: PendingJob, head: bool = True) -> None:
        if self._admit_if_fits(job):
            return
        if self.reclaiming_for is not None and not self.ledger.within_nominal(job.department, job.gpus):
            reason, message = (
                "quota_exhausted",
                (
                    f"GPUs are being reclaimed for job #{self.reclaiming_for.job_id} ({self.reclaiming_for.department}'s "
                    "nominal quota); no job starts on borrowed GPUs until it has started."
                    if self.snapshot.explain
                    else ""
                ),
            )
        else:
            reason, message = self._make_room(job, *self._why(job))
        self.waiting.append((job.job_id, reason, message))
        if not head:
            return
        self.head_reasons[job.department] = reason
        shadow = None if reason in ("borrowing_limit", "quota_exhausted") else self.releases.first_free(job.gpus)
        self.heads[job.department] = [job, shadow, self.releases.in_use_at(shadow) if shadow is not None else 0.0]

    def _behind_blocked_head(self, job: PendingJob) -> None:
        head, shadow, at_shadow = self.heads[job.department]
        mode = self.snapshot.fifo.get(job.department)
        within = self.ledger.within_nominal
        if (
            mode != STRICT_FIFO
            and within(job.department, job.gpus)
            and (within(job.department, job.gpus + head.gpus) or not within(head.department, head.gpus))
        ):
            # Guaranteed, and the head is not (or both are, together): it does not wait behind the head,
            # and may reclaim like a head.
            self._try(job, head=False)
            return
        # While GPUs are being freed for the head, nothing of its department may take them.
        strict = mode == STRICT_FIFO or self.head_reasons[job.department] == "preemption_in_progress"
        if mode == GREEDY and not strict and self._admit_if_fits(job):
            return
        if (
            not strict
            and shadow is not None
            and self._backfill_safe(job, head, shadow, at_shadow)
            and self._admit_if_fits(job)
        ):
            return
        if (
            not strict
            and shadow is None
            and self.ledger.within_nominal(job.department, job.gpus)
            and self._admit_if_fits(job)
        ):
            # The head waits to borrow, or for GPUs with no known release: a job its department is
            # guaranteed right now does not wait behind it.
            return
        if not self.snapshot.explain:
            self.waiting.append((job.job_id, "lower_in_queue", ""))
            return
        self.waiting.append(
            (
                job.job_id,
                "lower_in_queue",
                f"Waiting behind job #{head.job_id}, first in {job.department}'s {self.pool.name} queue"
                + (" (strict FIFO)." if strict else "; running it now would delay that job."),
            )
        )

    def _all_behind_head(self, department: str) -> None:
        queue = self.queues[department]
        for job in queue:
            if self.ledger.within_nominal(department, job.gpus):
                self._behind_blocked_head(job)  # guaranteed: it may still reclaim
            else:
                self.waiting.append((job.job_id, "lower_in_queue", ""))
        queue.clear()

    def _backfill_safe(self, job: PendingJob, head: PendingJob, shadow: float, at_shadow: float) -> bool:
        """EASY backfilling: done before the head's estimated start, or using GPUs the head will not need then."""
        if job.max_runtime and self.now + job.max_runtime <= shadow:
            return True
        return at_shadow + job.gpus + head.gpus <= self.pool.total + 1e-9

    def _why(self, job: PendingJob) -> tuple[str, str]:
        if not self.snapshot.explain:
            refused = self.ledger.refusal(job.department, job.gpus, may_borrow=job.preemptible)
            return refused or ("no_capacity" if job.gpus > self.occupancy.free + 1e-9 else "gang_does_not_fit"), ""
        checked = self.ledger.check(job.department, job.gpus, may_borrow=job.preemptible)
        if checked:
            return checked
        free = self.occupancy.free
        shape = f"{job.workers} worker{'s' if job.workers > 1 else ''} x {job.gpus_per_worker:g} GPU"
        if job.gpus > free + 1e-9:
            borrowers = ", ".join(f"{d} borrows {gpus:g}" for d, gpus in self._borrowers() if d != job.department)
            return "no_capacity", (
                f"Needs {job.gpus:g} GPUs ({shape}); {free:g} of {self.pool.total} {self.pool.name} "
                f"GPUs are free" + (f" ({borrowers})." if borrowers else ".")
            )
        return "gang_does_not_fit", (
            f"Needs {job.gpus:g} GPUs ({shape}); {free:g} of {self.pool.total} {self.pool.name} GPUs are free but not "
            "in a shape that holds every worker (each worker needs its GPUs on one node)."
        )

    def _borrowers(self) -> list[tuple[str, float]]:
        """The departments that borrow most (up to 6), worked out again only after admissions (evictions only
        mark workloads as stopping; usage changes when they have stopped, in a later cycle)."""
        if self._borrowers_at != len(self.decisions.admissions):
            borrowing = ((d, self.ledger.borrowed(d)) for d in self.ledger.usage)
            self._borrowers_cache = heapq.nsmallest(
                6, ((d, b) for d, b in borrowing if b > 0), key=lambda kv: (-kv[1], kv[0])
            )
            self._borrowers_at = len(self.decisions.admissions)
        return self._borrowers_cache

    def _make_room(self, job: PendingJob, reason: str, message: str) -> tuple[str, str]:
        if self.stopping and self._fits_once_stopped(job):
            # Not booked: several jobs may count on the same GPUs; the next cycle gives them to the first in
            # line (nominated, guaranteed first) and the others make room then. Booking them here made later
            # jobs evict more at once, and the ITP replay had more guarantee violations (75 against 20).
            ids = ", ".join(f"#{r.job_id}" for r in self.stopping)
            return "preemption_in_progress", f"Waiting for {ids} to stop (grace period); then it starts. {message}"
        victims = None
        if self.searches_left > 0 and self._eviction_could_help(job):
            self.searches_left -= 1
            floor = self.policy.factor * max(job.attained, self.policy.quantum)
            victims = find_victims(job, self.ledger, self.occupancy, self.evictable, self.by_service, floor)
        if (
            not victims
            and self.moves_left > 0
            and job.gpus_per_worker >= 1
            and self.ledger.within_nominal(job.department, job.gpus)
            and self.occupancy.free + self._reclaimable() + 1e-9 >= job.gpus
        ):
            # Guaranteed, and enough GPUs are free or borrowed, but scattered over nodes that hold others'
            # guaranteed work: clear some nodes, moving what is guaranteed elsewhere.
            self.moves_left -= 1
            victims = find_moves(job, self.ledger, self.occupancy, self._on_node(), {r.job_id for r in self.evictable})
        if not victims:
            return reason, message
        names = []
        for victim, why in victims:
            self._evict(victim, why, job)
            names.append(f"#{victim.job_id} ({victim.department}, {why})")
        return "preemption_in_progress", f"Preempting {', '.join(names)} to make room; it starts when they stop."

    def _on_node(self) -> dict[str, list[RunningJob]]:
        """node -> the running (not stopping) workloads with a worker there; made once, kept up to date."""
        if self.on_node is None:
            self.on_node = defaultdict(list)
            for run in self.running:
                for node in {slot.node for slot in run.slots}:
                    self.on_node[node].append(run)
        return self.on_node

    def _evict(self, victim: RunningJob, why: str, job: PendingJob) -> None:
        if why == "reclaim":
            what = f"{victim.department} borrows GPUs that {job.department}'s nominal guarantees"
        elif why == "priority":
            what = f"it has lower priority than #{job.job_id}"
        elif why == "move":
            what = (
                f"#{job.job_id} is within {job.department}'s nominal and needs whole GPUs on the node this job "
                "holds; it starts again at once on other GPUs, from its last checkpoint"
            )
        else:
            what = (
                f"it has had {victim.service(self.now) / 3600:.1f} GPU-hours of service and #{job.job_id} "
                f"{job.attained / 3600:.1f}; borrowed GPUs go to the less served job first"
            )
        self.decisions.preemptions.append(
            Preemption(
                job_id=victim.job_id,
                reason=why,
                for_job=job.job_id,
                message=f"Preempted for job #{job.job_id}: {what}.",
            )
        )
        # by identity: comparing frozen dataclasses field by field made this the slowest step of a cycle
        self.evictable = [r for r in self.evictable if r is not victim]
        self.running = [r for r in self.running if r is not victim]
        if self.on_node is not None:
            for node in {slot.node for slot in victim.slots}:
                self.on_node[node] = [r for r in self.on_node[node] if r is not victim]
        self.evictable_gpus[victim.department] -= victim.gpus
        remaining = [pair for pair in self.by_service if pair[1] is not victim]
        if len(remaining) < len(self.by_service):
            self.by_service = remaining
            if victim.service(self.now) >= self.policy.factor * self.policy.quantum:
                self.service_gpus -= victim.gpus
        self.stopping.append(victim)
        if self.after_stop is not None:
            self.after_stop.release(victim.slots)
            assert self.after_stop_ledger is not None  # made together with after_stop
            self.after_stop_ledger.remove(victim.department, victim.gpus, fixed=not victim.preemptible)

    def _fits_once_stopped(self, job: PendingJob) -> bool:
        """Would ``job`` fit once the stopping jobs are gone? Kept as a second occupancy and ledger, made when
        first asked and then kept in step with admissions and evictions."""
        if self.after_stop is None:
            self.after_stop, self.after_stop_ledger = self.occupancy.copy(), self.ledger.copy()
            for stopping in self.stopping:
                self.after_stop.release(stopping.slots)
                self.after_stop_ledger.remove(stopping.department, stopping.gpus, fixed=not stopping.preemptible)
        assert self.after_stop_ledger is not None  # made together with after_stop
        if job.gpus > self.after_stop.free + 1e-9:
            return False
        if self.after_stop_ledger.refusal(job.department, job.gpus, may_borrow=job.preemptible) is not None:
            return False
        # the same shape asked again with nothing admitted or evicted meanwhile gets the same answer
        key = (job.workers, job.gpus_per_worker, len(self.decisions.admissions), len(self.stopping))
        if key not in self._once_stopped:
            self._once_stopped[key] = self.after_stop.fits(job.workers, job.gpus_per_worker)
        return self._once_stopped[key]

    def _reclaimable(self) -> float:
        return sum(min(gpus, self.ledger.borrowed(department)) for department, gpus in self.evictable_gpus.items())

    def _eviction_could_help(self, job: PendingJob) -> bool:
        """A cheap upper bound: could evicting every candidate free enough GPUs at all?"""
        gain = (
            self.evictable_gpus[job.department] + self.service_gpus
        )  # own lower-priority work, long-served work (over-estimates)
        if self.ledger.within_nominal(job.department, job.gpus):
            gain += sum(
                gpus
                for department, gpus in self.evictable_gpus.items()
                if department != job.department and self.ledger.borrowed(department) > 0
            )
        return gain > 0 and self.occupancy.free + sum(r.gpus for r in self.stopping) + gain + 1e-9 >= job.gpus
