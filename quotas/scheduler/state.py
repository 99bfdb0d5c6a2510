"""The state of one pool's scheduling cycle (quotas.scheduler.core._Cycle), set up from the snapshot.

Owns what a cycle starts from and keeps up to date while it admits and evicts: the running jobs (and those
already stopping), who may be evicted in eviction order and by attained service, the quota ledger, the
occupancy of the pool's nodes, the GPUs' expected releases, each department's queue in order, the blocked
heads, and the budget of eviction and move searches per cycle.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from quotas.scheduler.eta import Releases
from quotas.scheduler.ledger import Ledger
from quotas.scheduler.placement import Occupancy, policy_for
from quotas.scheduler.types import Decisions, PendingJob, PoolState, RunningJob, ServicePolicy, Slot, Snapshot

EVICTION_SEARCHES_PER_CYCLE = 64
MOVE_SEARCHES_PER_CYCLE = 8  # a move search looks at every node


class CycleState:
    """What one pool's cycle knows and keeps up to date; _Cycle (quotas.scheduler.core) acts on it."""

    def __init__(
        self,
        snapshot: Snapshot,
        pool: PoolState,
        pending: list[PendingJob],
        running: list[RunningJob],
        now: float,
        decisions: Decisions,
        prepared: Prepared | None = None,
    ):
        """``prepared``: the parts an incremental scheduler keeps between cycles (quotas.scheduler.incremental),
        used instead of building them from ``pending`` and ``running``; equal to what would be built."""
        self.pool, self.now, self.decisions, self.snapshot = pool, now, decisions, snapshot
        self.stopping = [job for job in running if job.terminating]
        # the occupancy and the quota ledger once every stopping job is gone (made when needed)
        self.after_stop: Occupancy | None = None
        self.after_stop_ledger: Ledger | None = None
        self.running = [job for job in running if not job.terminating]
        self.policy = snapshot.service
        # Who may be evicted (preemptible, ran its minimum, not stopping): the GPUs of each department's, and the
        # GPUs of those long-served enough for service evictions (an upper bound), for the cheap bound of
        # room._eviction_could_help. Their eviction order (``evictable``, ``by_service``, sorted) and the nodes
        # holding work that cannot be preempted (``pinned``) are made when a cycle first needs them: a cycle whose
        # bound rules every search out, or that places no such work, does not sort them.
        self.evictable_gpus: dict[str, float] = defaultdict(float)
        self._candidates: list[RunningJob] = []
        min_runtime = pool.min_runtime_seconds
        for job in self.running:
            if job.preemptible and now - job.started_at >= min_runtime:
                self._candidates.append(job)
                self.evictable_gpus[job.department] += job.gpus
        if prepared is not None:
            self.ledger, self.occupancy, self.releases = prepared.ledger, prepared.occupancy, prepared.releases
            self.queues, self.by_id = prepared.queues, prepared.by_id
            self.nominated: list[PendingJob] = prepared.nominated
        else:
            self._build(snapshot, pool, pending, running, now)
        self.waiting: list[tuple[int, str, str]] = []  # job id, reason, message, in admission order
        self.heads: dict[str, Head] = {}  # department -> its blocked head
        self.head_reasons: dict[str, str] = {}
        self.reclaiming_for: PendingJob | None = None  # a guaranteed job GPUs are being freed for
        self._borrowers_at = -1
        self._borrowers_cache: list[tuple[str, float]] = []
        self._once_stopped: dict[tuple[Any, ...], bool] = {}
        self._no_room: dict[tuple[Any, ...], tuple[str, str]] = {}  # core._try: shapes that found no room
        self._no_fit: set[tuple[int, float, bool, int, int]] = set()  # core._admit_if_fits: shapes that did not fit
        self._stopping_ids: tuple[int, str] = (
            -1,
            "",
        )  # the stopping jobs' ids as a message says them, and for how many
        # (job, GPUs held for it) of the jobs whose room is booked in this cycle (quotas.scheduler.room._book)
        self.booked: list[tuple[PendingJob, list[Slot]]] = []
        self.booked_ids: set[int] = set()
        self.on_node: dict[str, list[RunningJob]] | None = None
        # Eviction searches are the costly part of a cycle: this many per cycle, the rest try next cycle.
        self.searches_left, self.moves_left = EVICTION_SEARCHES_PER_CYCLE, MOVE_SEARCHES_PER_CYCLE
        # Made when first read (the properties below), then kept up to date (room._evict writes them); fields rather
        # than functools.cached_property, which the compiled core (quotas.scheduler.compiled) does not have.
        self._pinned: set[str] | None = None
        self._evictable: list[RunningJob] | None = None
        self._by_service: list[tuple[float, RunningJob]] | None = None
        self._service_gpus: float | None = None

    @property
    def pinned(self) -> set[str]:
        """Nodes holding work that cannot be preempted. More such work goes there first (core._admit_if_fits), so the
        other nodes stay clearable: scattered over every node with a free GPU, it pinned the free GPUs of a busy pool
        in ones and twos where no move could gather them for a guaranteed 8-GPU job."""
        if self._pinned is None:
            self._pinned = self._make_pinned()
        return self._pinned

    def _make_pinned(self) -> set[str]:
        return {slot.node for job in self.running if not job.preemptible for slot in job.slots}

    @property
    def evictable(self) -> list[RunningJob]:
        """Who may be evicted, in eviction order: lowest priority, then least work lost (most recently started, or
        most recently checkpointed for jobs that declare their checkpoints; RunningJob.unsaved, inline)."""
        if self._evictable is None:
            self._evictable = self._make_evictable()
        return self._evictable

    def _make_evictable(self) -> list[RunningJob]:
        now = self.now
        keys = []
        for job in self._candidates:
            ran = now - job.started_at
            ran = ran if ran > 0.0 else 0.0
            every = job.checkpoint_every
            keys.append((job.priority, ran % every if every else ran))
        candidates = self._candidates
        return [candidates[i] for i in sorted(range(len(keys)), key=keys.__getitem__)]

    def _evictable_ids(self) -> set[int]:
        """The ids of who may be evicted, without making the eviction order (moves ask for the set only). Until the
        order is made nothing was evicted (an eviction makes it first), so the candidates are the same workloads."""
        return {job.job_id for job in (self._evictable if self._evictable is not None else self._candidates)}

    @property
    def by_service(self) -> list[tuple[float, RunningJob]]:
        """Least attained service: (GPU-seconds, workload) of those that ran long enough this time, most served
        first (ties in eviction order)."""
        if self._by_service is None:
            self._by_service = self._make_by_service()
        return self._by_service

    def _make_by_service(self) -> list[tuple[float, RunningJob]]:
        pairs = list(self._served(self.evictable))
        pairs.sort(key=itemgetter(0), reverse=True)  # stable: equal service keeps eviction order
        return pairs

    def _served(self, jobs: list[RunningJob]) -> Iterator[tuple[float, RunningJob]]:
        """(GPU-seconds of service, workload) of those of ``jobs`` that ran long enough in this run to be evicted for
        less-served work (and, declaring checkpoints, saved one recently enough); none where the policy is off.
        RunningJob.unsaved and .service inline: this runs for every workload, every cycle."""
        policy = self.policy
        if not policy.enabled:
            return
        now, min_run, max_unsaved = self.now, policy.min_run_seconds, policy.max_unsaved_seconds
        for job in jobs:
            ran = now - job.started_at
            if ran < min_run:
                continue
            ran = ran if ran > 0.0 else 0.0
            every = job.checkpoint_every
            if every and ran % every > max_unsaved:
                continue
            yield job.attained + job.gpus * ran, job

    @property
    def service_gpus(self) -> float:
        """An upper bound of what service evictions can free for a fresh job."""
        if self._service_gpus is None:
            self._service_gpus = self._make_service_gpus()
        return self._service_gpus

    def _make_service_gpus(self) -> float:
        floor = self.policy.factor * self.policy.quantum
        # Without sorting where the orders are not made yet: room._eviction_could_help asks for this in most cycles,
        # and a search (which needs the orders) follows in few. Until they are made nothing was evicted (an eviction
        # makes them first), so the candidates are the same workloads.
        served = self._by_service if self._by_service is not None else self._served(self._candidates)
        return sum(job.gpus for service, job in served if service >= floor)

    def _build(
        self, snapshot: Snapshot, pool: PoolState, pending: list[PendingJob], running: list[RunningJob], now: float
    ) -> None:
        """The ledger, occupancy, releases and ordered queues, from the snapshot's jobs (a stateless cycle)."""
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
        self.nominated = []
        for waiting_job in pending:
            queues[waiting_job.department].append(waiting_job)
            if waiting_job.nominated:
                self.nominated.append(waiting_job)
        self.by_id = {job.job_id: job for job in pending}
        key = queue_key(snapshot.service)
        self.queues = {d: deque(sorted(q, key=key)) for d, q in queues.items()}


def queue_key(policy: ServicePolicy) -> Callable[[PendingJob], tuple[Any, ...]]:
    """The order of a department's queue: priority, then fresh before well-served (``policy.quantum``), then
    submit time; the job id breaks ties, so the order is total."""
    quantum = policy.quantum if policy.enabled else float("inf")
    return lambda j: (-j.priority, j.attained >= quantum, j.submitted_at, j.job_id)


class Head:
    """A department's blocked head: the job, its estimated start (shadow time; None where it has none) and the GPUs
    booked at that time (core._admit_if_fits adds what it admits that still runs then)."""

    def __init__(self, job: PendingJob, shadow: float | None, at_shadow: float) -> None:
        self.job, self.shadow, self.at_shadow = job, shadow, at_shadow


@dataclass
class Prepared:
    """What a cycle starts from that an incremental scheduler keeps between cycles instead of rebuilding."""

    ledger: Ledger
    occupancy: Occupancy
    releases: Releases
    queues: dict[str, deque[PendingJob]]
    nominated: list[PendingJob]
    by_id: dict[int, PendingJob]
