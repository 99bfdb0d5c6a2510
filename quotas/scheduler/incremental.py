"""The scheduler as a standing object: built once from a Snapshot, then changes in, a cycle at ``now``, decisions out.

``schedule(snapshot, now=...)`` (quotas.scheduler.core) builds everything a cycle starts from -- the quota
ledger, the occupancy of every node, the expected releases, each department's ordered queue -- out of the
snapshot's jobs, every time. ``IncrementalScheduler`` keeps those between cycles and changes only what a change
touches:

- ``add_pending`` / ``update_pending`` / ``remove_pending``: a job queued, changed (priority, nominated,
  attained service), cancelled; its department's queue stays sorted (one bisect);
- ``add_running`` / ``update_running`` / ``remove_running``: a workload started (its slots taken), changed
  (terminating, deadline), ended (its slots and quota usage given back);
- ``set_pool`` / ``remove_pool``, ``set_quotas``, ``set_fifo``, ``set_service``: a pool, the quotas, the
  FIFO modes, the service policy changed;
- ``cycle(now)``: one cycle, whose decisions it also applies to itself, as the portal does: admitted jobs run
  from ``now`` on the slots they were given (``started_at=now``, ``deadline=now + max_runtime``), preempted
  ones are stopping (``terminating``). A caller that knows more of a started workload (its checkpoint cadence)
  or could not apply a decision says so with ``update_running`` or ``remove_running``.

The contract, checked by a property test (tests/quotas/test_incremental_equivalence.py): after any sequence of
changes and cycles, ``cycle(now)`` decides exactly what ``schedule(self.snapshot(), now=now)`` decides.
``snapshot()`` is the equivalent fresh snapshot: pending and running jobs in the order they were added (an
update keeps a job's place), each pool's ``used`` map as the running jobs and the initial snapshot left it.
The order counts: nominated jobs of equal priority and submit time go in the order listed, and running ones of
equal eviction rank are evicted in that order (a caller that needs another order removes and adds them again).
Exact for GPU shares that are binary fractions (0.25, 0.5: sums do not round); other shares may differ from a
fresh sum in the last bit.

Where keeping something correct is not cheap the object rebuilds that pool's state from its jobs (counted in
``rebuilds``, by reason): a pool whose nodes change, a running job whose slots are not all on the pool's nodes
or do not fit what is free, a cycle that raised half-way. The fragmentation policy scores against the mix of the
pool's pending and running workers, so a pool with that policy makes its policy (not its occupancy) each cycle.
The snapshot's pools must hold in ``used`` what its running jobs hold (the portal's do).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Any

from quotas.scheduler.core import _Cycle
from quotas.scheduler.eta import Releases
from quotas.scheduler.ledger import Ledger
from quotas.scheduler.placement import Occupancy, make_policy, policy_for, units
from quotas.scheduler.placement.fragmentation import FULL
from quotas.scheduler.state import Prepared, queue_key
from quotas.scheduler.types import (
    FRAGMENTATION,
    Decisions,
    PendingJob,
    PoolState,
    QuotaState,
    RunningJob,
    ServicePolicy,
    Slot,
    Snapshot,
    Waiting,
)

_second = itemgetter(1)


@dataclass
class _PoolBook:
    """What one pool keeps between cycles."""

    pool: PoolState
    occupancy: Occupancy
    used: dict[tuple[str, int], float]  # (node, GPU) -> share in use, as the snapshot's ``used`` would say
    quotas: list[QuotaState] = field(default_factory=list)
    pending: dict[int, PendingJob] = field(default_factory=dict)  # in the order added
    running: dict[int, RunningJob] = field(default_factory=dict)  # in the order added
    queues: dict[str, list[tuple[tuple[Any, ...], PendingJob]]] = field(default_factory=dict)  # sorted (key, job)
    seq: dict[int, int] = field(default_factory=dict)  # pending job id -> the order it was added in
    nominated: set[int] = field(default_factory=set)
    usage: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    fixed: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    holders: Counter[str] = field(default_factory=Counter)  # department -> running workloads
    ends: list[tuple[float, float]] = field(default_factory=list)  # sorted (deadline, GPUs) of running jobs
    in_use: float = 0.0  # GPUs of every running job (what Releases counts as booked)


@dataclass
class _Settled:
    """A pool's last cycle, which admitted and evicted nothing: its end state (rooms it booked still held) and what
    it said of every waiting job, kept for the arrivals that follow it (``IncrementalScheduler.arrivals_window``)."""

    cycle: _Cycle
    at: float  # the cycle's ``now``
    waiting: list[Waiting]


class IncrementalScheduler:
    def __init__(self, snapshot: Snapshot, *, arrivals_window: float = 0.0):
        """``arrivals_window``: for this many seconds after a pool's cycle that admitted and evicted nothing, while
        only new jobs are queued there, a cycle decides those jobs alone (``cycle``); 0, the default: every cycle
        looks at every waiting job, and decides exactly what ``schedule()`` does."""
        self.arrivals_window = arrivals_window
        self._settled: dict[int, _Settled] = {}
        self._arrivals: dict[int, list[PendingJob]] = defaultdict(list)  # pool -> jobs queued since its last cycle
        self.quick_cycles = 0  # pools' cycles that decided only arrivals
        self.quotas: tuple[QuotaState, ...] = snapshot.quotas
        self.fifo = dict(snapshot.fifo)
        self.service = snapshot.service
        self.explain = snapshot.explain
        self.rebuilds: Counter[str] = Counter()  # reason -> full rebuilds of one pool's state
        self.cycles = 0
        self._seq = 0
        self._key = queue_key(self.service)
        self._pools: dict[int, _PoolBook] = {}
        self._where: dict[int, int] = {}  # job id -> pool id, pending or running
        for pool in snapshot.pools.values():
            self._pools[pool.pool_id] = self._new_book(pool, dict(pool.used))
        for run in snapshot.running:
            self._book(run.pool_id).running[run.job_id] = run
            self._where[run.job_id] = run.pool_id
            self._count_running(self._book(run.pool_id), run, 1)
        for job in snapshot.pending:
            self.add_pending(job)

    # --- changes ---------------------------------------------------------------------------
    def add_pending(self, job: PendingJob) -> None:
        """A job queued (or, if it is already pending, changed: it keeps its place in ``snapshot()``)."""
        if job.job_id in self._where and job.job_id not in self._book(self._where[job.job_id]).pending:
            raise ValueError(f"job #{job.job_id} is running; remove_running it before queueing it again")
        book = self._book(job.pool_id)
        old_pool = self._where.get(job.job_id)
        if old_pool is None:
            self._arrivals[job.pool_id].append(job)
        else:
            self._unsettle(old_pool)
            self._unsettle(job.pool_id)
        if old_pool is not None and old_pool != job.pool_id:
            self.remove_pending(job.job_id)
        old = book.pending.get(job.job_id)
        if old is not None:
            self._unqueue(book, old)
        else:
            self._seq += 1
            book.seq[job.job_id] = self._seq
        book.pending[job.job_id] = job
        self._where[job.job_id] = job.pool_id
        bisect.insort(book.queues.setdefault(job.department, []), (self._key(job), job))
        if job.nominated:
            book.nominated.add(job.job_id)
        else:
            book.nominated.discard(job.job_id)

    def update_pending(self, job: PendingJob) -> None:
        """A pending job changed (priority, nominated, ...): ``add_pending`` (it keeps its place)."""
        self.add_pending(job)

    def remove_pending(self, job_id: int) -> PendingJob:
        """A job cancelled or no longer offered to the scheduler; KeyError if it is not pending."""
        self._unsettle(self._where[job_id])
        book = self._book(self._where[job_id])
        job = book.pending.pop(job_id)
        self._unqueue(book, job)
        book.nominated.discard(job_id)
        del book.seq[job_id], self._where[job_id]
        return job

    def add_running(self, run: RunningJob) -> None:
        """A workload holds GPUs now (started elsewhere, or seen on a re-read): its slots are taken."""
        if run.job_id in self._where:
            raise ValueError(f"job #{run.job_id} is already known; use update_running or remove it first")
        self._unsettle(run.pool_id)
        book = self._book(run.pool_id)
        book.running[run.job_id] = run
        self._where[run.job_id] = run.pool_id
        self._count_running(book, run, 1)
        self._take(book, run.slots)

    def update_running(self, run: RunningJob) -> None:
        """A running workload changed (terminating, deadline, priority, checkpoints, or other slots)."""
        self._unsettle(self._where[run.job_id])
        book = self._book(self._where[run.job_id])
        old = book.running[run.job_id]
        if old.pool_id != run.pool_id:
            self.remove_running(run.job_id)
            self.add_running(run)
            return
        self._count_running(book, old, -1)
        self._count_running(book, run, 1)
        if old.slots != run.slots:
            self._give(book, old.slots)
            self._take(book, run.slots)
        book.running[run.job_id] = run  # keeps its place

    def remove_running(self, job_id: int) -> RunningJob:
        """A workload ended (finished, failed, stopped after preemption): its GPUs and quota usage are free."""
        self._unsettle(self._where[job_id])
        book = self._book(self._where[job_id])
        run = book.running.pop(job_id)
        del self._where[job_id]
        self._count_running(book, run, -1)
        self._give(book, run.slots)
        return run

    def remove(self, job_id: int) -> None:
        """Whichever it is, pending or running; nothing if it is not known."""
        pool_id = self._where.get(job_id)
        if pool_id is None:
            return
        if job_id in self._pools[pool_id].pending:
            self.remove_pending(job_id)
        else:
            self.remove_running(job_id)

    def set_pool(self, pool: PoolState) -> None:
        """A pool added or changed. Its ``used`` is read only for a new pool (then its running jobs keep it up
        to date); other nodes rebuild the pool's occupancy from its running jobs."""
        book = self._pools.get(pool.pool_id)
        if book is None:
            self._pools[pool.pool_id] = self._new_book(pool, dict(pool.used))
            return
        self._unsettle(pool.pool_id)
        old = book.pool
        book.pool = replace(pool, used={})
        if (old.nodes, old.gpus_per_node) != (pool.nodes, pool.gpus_per_node):
            self._rebuild(book, "pool nodes changed")

    def remove_pool(self, pool_id: int) -> None:
        self._unsettle(pool_id)
        self._arrivals.pop(pool_id, None)
        book = self._pools.pop(pool_id)
        for job_id in [*book.pending, *book.running]:
            del self._where[job_id]

    def set_quotas(self, quotas: tuple[QuotaState, ...]) -> None:
        """Every pool's quotas (nominal, borrowing and lending limits, recent usage), as a snapshot has them."""
        self._unsettle_all()
        self.quotas = tuple(quotas)
        for book in self._pools.values():
            book.quotas = [q for q in self.quotas if q.pool_id == book.pool.pool_id]

    def set_fifo(self, fifo: dict[str, str]) -> None:
        self._unsettle_all()
        self.fifo = dict(fifo)

    def set_service(self, service: ServicePolicy) -> None:
        """The queue order depends on it (well-served jobs wait behind fresh ones): every queue is sorted again."""
        self._unsettle_all()
        self.service, self._key = service, queue_key(service)
        for book in self._pools.values():
            book.queues = {}
            for job in book.pending.values():
                bisect.insort(book.queues.setdefault(job.department, []), (self._key(job), job))

    # --- the cycle -------------------------------------------------------------------------
    def cycle(self, now: float) -> Decisions:
        """One cycle over every pool with waiting jobs; its decisions are applied here (see the module)."""
        decisions = Decisions()
        settings = Snapshot(
            pools={}, pending=(), quotas=self.quotas, fifo=self.fifo, service=self.service, explain=self.explain
        )
        hold = self.arrivals_window > 0
        for pool_id, book in self._pools.items():
            arrivals = self._arrivals.pop(pool_id, [])
            if not book.pending:
                self._unsettle(pool_id)
                continue
            admitted, preempted, waited = len(decisions.admissions), len(decisions.preemptions), len(decisions.waiting)
            settled = self._settled.pop(pool_id, None)
            if settled is not None and now - settled.at <= self.arrivals_window:
                # Only new jobs since a cycle that decided nothing: the others would wait as they did.
                cycle = settled.cycle
                try:
                    cycle.decide_arrivals(arrivals, now, decisions)
                except Exception:
                    cycle._unbook()
                    self._rebuild(book, "cycle raised")
                    raise
                self.quick_cycles += 1
                decisions.waiting.extend(settled.waiting)
                decisions.waiting.extend(
                    Waiting(job_id=job_id, reason=reason, message=message, position=position)
                    for position, (job_id, reason, message) in enumerate(cycle.waiting, start=len(settled.waiting) + 1)
                )
            else:
                if settled is not None:
                    settled.cycle._unbook()
                running = list(book.running.values())
                cycle = _Cycle(settings, book.pool, [], running, now, decisions, self._prepared(book, running, now))
                try:
                    cycle.run(hold_rooms=hold)
                except Exception:
                    self._rebuild(book, "cycle raised")
                    raise
                settled = _Settled(cycle=cycle, at=now, waiting=[])
            if hold and len(decisions.admissions) == admitted and len(decisions.preemptions) == preempted:
                settled.waiting = decisions.waiting[waited:]
                self._settled[pool_id] = settled
            elif hold:
                cycle._unbook()
            self._apply(book, decisions, admitted, preempted, now)
        self.cycles += 1
        return decisions

    def snapshot(self) -> Snapshot:
        """The equivalent fresh snapshot: ``schedule(self.snapshot(), now=now)`` decides what ``cycle(now)`` does."""
        pools = {}
        for pool_id, book in self._pools.items():
            index = book.occupancy.index
            used = dict(sorted(book.used.items(), key=lambda kv: (index[kv[0][0]], kv[0][1])))
            pools[pool_id] = replace(book.pool, used=used)
        return Snapshot(
            pools=pools,
            pending=tuple(job for book in self._pools.values() for job in book.pending.values()),
            running=tuple(run for book in self._pools.values() for run in book.running.values()),
            quotas=self.quotas,
            fifo=dict(self.fifo),
            service=self.service,
            explain=self.explain,
        )

    def job(self, job_id: int) -> PendingJob | RunningJob | None:
        """What the scheduler holds of a job now: pending, running, or None."""
        pool_id = self._where.get(job_id)
        if pool_id is None:
            return None
        book = self._pools[pool_id]
        return book.pending.get(job_id) or book.running.get(job_id)

    def settled(self, pool_id: int, now: float) -> bool:
        """Would the pool's next cycle at ``now`` be an arrival cycle (or have nothing to decide)?"""
        book = self._pools.get(pool_id)
        if book is None:
            return False
        settled = self._settled.get(pool_id)
        if not book.pending:
            return True
        return settled is not None and now - settled.at <= self.arrivals_window

    def waiting_pools(self) -> set[int]:
        """The pools where jobs wait."""
        return {pool_id for pool_id, book in self._pools.items() if book.pending}

    def pool_ids(self) -> set[int]:
        return set(self._pools)

    def pending_count(self) -> int:
        return sum(len(book.pending) for book in self._pools.values())

    # --- inside ----------------------------------------------------------------------------
    def _unsettle(self, pool_id: int) -> None:
        """Something other than a new job changed in the pool: its next cycle looks at every waiting job again, and
        the rooms the last one held are given back first (the occupancy is the pool's own)."""
        settled = self._settled.pop(pool_id, None)
        if settled is not None:
            settled.cycle._unbook()

    def _unsettle_all(self) -> None:
        for pool_id in list(self._settled):
            self._unsettle(pool_id)

    def _book(self, pool_id: int) -> _PoolBook:
        book = self._pools.get(pool_id)
        if book is None:
            raise KeyError(f"pool {pool_id} is not known to the scheduler; set_pool it first")
        return book

    def _new_book(self, pool: PoolState, used: dict[tuple[str, int], float]) -> _PoolBook:
        nodes = set(pool.nodes)
        used = {key: share for key, share in used.items() if key[0] in nodes and share > 0}
        book = _PoolBook(pool=replace(pool, used={}), occupancy=Occupancy(replace(pool, used=used)), used=used)
        book.quotas = [q for q in self.quotas if q.pool_id == pool.pool_id]
        return book

    def _count_running(self, book: _PoolBook, run: RunningJob, sign: int) -> None:
        department = run.department
        book.holders[department] += sign
        if book.holders[department] == 0:
            del book.holders[department], book.usage[department]
            book.fixed.pop(department, None)
        else:
            book.usage[department] += sign * run.gpus
            if not run.preemptible:
                book.fixed[department] += sign * run.gpus
        book.in_use += sign * run.gpus
        if run.deadline is not None and run.deadline < float("inf"):
            entry = (run.deadline, run.gpus)
            if sign > 0:
                bisect.insort(book.ends, entry)
            else:
                del book.ends[bisect.bisect_left(book.ends, entry)]

    def _unqueue(self, book: _PoolBook, job: PendingJob) -> None:
        queue = book.queues[job.department]
        del queue[bisect.bisect_left(queue, (self._key(job),))]
        if not queue:
            del book.queues[job.department]

    def _take(self, book: _PoolBook, slots: tuple[Slot, ...]) -> None:
        index, free = book.occupancy.index, book.occupancy.gpu_free
        for slot in slots:
            i = index.get(slot.node)
            if i is None or any(free[i][gpu] < (units(slot.fraction) if slot.fraction else FULL) for gpu in slot.gpus):
                self._mark_used(book, slots, 1)
                self._rebuild(book, "running job's slots not free on the pool's nodes")
                return
        book.occupancy.retake(slots)
        self._mark_used(book, slots, 1)

    def _give(self, book: _PoolBook, slots: tuple[Slot, ...]) -> None:
        if any(slot.node not in book.occupancy.index for slot in slots):
            self._mark_used(book, slots, -1)
            self._rebuild(book, "running job's slots not on the pool's nodes")
            return
        book.occupancy.release(slots)
        self._mark_used(book, slots, -1)

    def _mark_used(self, book: _PoolBook, slots: tuple[Slot, ...], sign: int) -> None:
        used = book.used
        for slot in slots:
            share = slot.fraction or 1.0
            for gpu in slot.gpus:
                key = (slot.node, gpu)
                left = used.get(key, 0.0) + sign * share
                if left > 1e-9:
                    used[key] = left
                else:
                    used.pop(key, None)

    def _rebuild(self, book: _PoolBook, reason: str) -> None:
        """The pool's occupancy again from its ``used`` map (kept from the snapshot and every running job)."""
        self.rebuilds[reason] += 1
        nodes = set(book.pool.nodes)
        book.used = {key: share for key, share in book.used.items() if key[0] in nodes}
        book.occupancy = Occupancy(replace(book.pool, used=book.used))

    def _prepared(self, book: _PoolBook, running: list[RunningJob], now: float) -> Prepared:
        pool, occupancy = book.pool, book.occupancy
        _canonical(occupancy)
        if pool.placement == FRAGMENTATION:
            occupancy.policy = policy_for(pool, list(book.pending.values()), running)
        elif getattr(occupancy.policy, "name", None) != pool.placement:
            occupancy.policy = make_policy(pool.placement)
        ledger = Ledger(pool, book.quotas, book.usage, book.fixed)
        releases = Releases(float(pool.total), now)
        releases.in_use = book.in_use
        # as Releases.book has them: an end already past counts as now
        past = bisect.bisect_right(book.ends, (now, float("inf")))
        releases.ends = sorted((now, gpus) for _, gpus in book.ends[:past]) + book.ends[past:]
        queues = {d: deque(map(_second, q)) for d, q in book.queues.items()}
        # in the order they are listed in snapshot(): the cycle's sort of them is stable
        nominated = [book.pending[i] for i in sorted(book.nominated, key=book.seq.__getitem__)]
        return Prepared(ledger, occupancy, releases, queues, nominated, book.pending)

    def _apply(self, book: _PoolBook, decisions: Decisions, first: int, first_preempted: int, now: float) -> None:
        """The cycle's admissions run from now (their slots are already taken in the occupancy); preempted
        workloads of this pool are stopping."""
        for admission in decisions.admissions[first:]:
            job = book.pending[admission.job_id]
            self.remove_pending(job.job_id)
            run = RunningJob(
                job_id=job.job_id,
                pool_id=job.pool_id,
                department=job.department,
                priority=job.priority,
                preemptible=job.preemptible,
                gpus=job.gpus,
                slots=admission.slots,
                started_at=now,
                deadline=now + job.max_runtime if job.max_runtime else None,
                attained=job.attained,
            )
            book.running[run.job_id] = run
            self._where[run.job_id] = run.pool_id
            self._count_running(book, run, 1)
            self._mark_used(book, run.slots, 1)
        for preemption in decisions.preemptions[first_preempted:]:
            victim = book.running.get(preemption.job_id)
            if victim is not None and not victim.terminating:
                book.running[victim.job_id] = replace(victim, terminating=True)


def _canonical(occupancy: Occupancy) -> None:
    """Index buckets in the order a fresh Occupancy has them (node order; shared GPUs by node, then GPU): binpack
    and spread take a bucket's first entry, and taking and giving back appends to the end."""
    index = occupancy.index
    for free, bucket in enumerate(occupancy.by_free):
        if len(bucket) > 1 and not _ordered([index[node] for node in bucket]):
            occupancy.by_free[free] = dict.fromkeys(sorted(bucket, key=index.__getitem__))
    for level, keys in occupancy.shared.items():
        if len(keys) > 1 and not _ordered([(index[node], gpu) for node, gpu in keys]):
            occupancy.shared[level] = dict.fromkeys(sorted(keys, key=lambda key: (index[key[0]], key[1])))


def _ordered(values: list[Any]) -> bool:
    return all(a < b for a, b in zip(values, values[1:]))
