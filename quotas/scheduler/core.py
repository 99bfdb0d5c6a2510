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

The cycle's state is quotas.scheduler.state, making room (waiting for stopping jobs, evicting, moving) is
quotas.scheduler.room; this module is the cycle itself: the order of turns, admission, backfilling, the heads
jobs wait behind and the reasons they wait.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Callable

from quotas.scheduler.eta import estimate_starts
from quotas.scheduler.ledger import EPSILON
from quotas.scheduler.moves import find_packing
from quotas.scheduler.placement import FULL
from quotas.scheduler.room import RoomMaker
from quotas.scheduler.state import EVICTION_SEARCHES_PER_CYCLE, MOVE_SEARCHES_PER_CYCLE, Head, queue_key
from quotas.scheduler.types import (
    GREEDY,
    STRICT_FIFO,
    Admission,
    Decisions,
    PendingJob,
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


class _Cycle(RoomMaker):
    def run(self, *, hold_rooms: bool = False) -> None:
        """One cycle. Rooms booked for jobs that evict (or wait for stopping jobs) are held within this cycle only,
        unless ``hold_rooms``: then the caller gives them back (``_unbook``) when it is done with this cycle's end
        state (quotas.scheduler.incremental decides later arrivals on it)."""
        try:
            self._run()
        except BaseException:
            self._unbook()
            raise
        if not hold_rooms:
            self._unbook()

    def decide_arrivals(self, arrivals: list[PendingJob], now: float, decisions: Decisions) -> None:
        """Go on from the end of this cycle, which admitted and evicted nothing, with jobs queued since, as if they came
        last in its order (quotas.scheduler.incremental): each waits behind its department's blocked head if it is
        queued behind it, else it is tried like a head; in two rounds, as in _run. The rooms this cycle booked are
        still held, and while GPUs are being reclaimed for a guaranteed job nothing borrows them. The eviction and
        move budgets start again."""
        self.now, self.decisions, self.waiting = now, decisions, []
        self.searches_left, self.moves_left = EVICTION_SEARCHES_PER_CYCLE, MOVE_SEARCHES_PER_CYCLE
        self._borrowers_at, self._once_stopped, self._no_room = -1, {}, {}  # keyed by counts of the earlier decisions
        self._no_fit = set()
        key = queue_key(self.snapshot.service)
        queues: dict[str, deque[PendingJob]] = defaultdict(deque)
        for job in sorted(arrivals, key=key):
            queues[job.department].append(job)  # each department's in queue order

        def decide(job: PendingJob) -> None:
            head = self.heads.get(job.department)
            if head is not None and key(head.job) < key(job):
                self._behind_blocked_head(job)
            else:
                self._try(job)

        self._take_turns(queues, decide, self._guaranteed_prefixes(queues))
        self._take_turns(queues, decide)

    def _run(self) -> None:
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
        self._take_turns(self.queues, self._decide, self._guaranteed_prefixes(self.queues))
        self._take_turns(self.queues, self._decide)
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

    def _decide(self, job: PendingJob) -> None:
        if job.department in self.heads:
            self._behind_blocked_head(job)
        else:
            self._try(job)

    def _guaranteed_prefixes(self, queues: dict[str, deque[PendingJob]]) -> dict[str, int]:
        """The first round of a cycle (_take_turns): how many of each department's first queued jobs take part, up to
        its last job that fits in its unused nominal quota (departments without one wait for the second round)."""
        nominal, usage = self.ledger.nominal, self.ledger.usage
        counts = {}
        for department, queue in queues.items():
            room = nominal(department) - usage[department] + EPSILON
            for place, job in zip(range(len(queue), 0, -1), reversed(queue)):  # from the back: the last one that fits
                if job.gpus <= room:
                    counts[department] = place
                    break
        return counts

    def _take_turns(
        self,
        queues: dict[str, deque[PendingJob]],
        decide: Callable[[PendingJob], None],
        counts: dict[str, int] | None = None,
    ) -> None:
        """Departments take turns by fair share, each deciding its next job in queue order; only the one that just
        went changes its key.

        A cycle has two rounds. In the first (``counts``), only departments with a job that fits in their unused
        nominal quota take part, each with its queue up to that job, and a department whose next job would start on
        borrowed GPUs goes after those whose next job needs none (as Kueue admits workloads that need no borrowing
        before those that do). Else a borrower first by fair share (one using none of its small nominal) takes GPUs
        just freed, an entitled job of another department waits with no room, and only the next cycle reclaims them.
        In the second round everything left takes its turns."""
        first_round = counts is not None
        taking_part = queues.keys() if counts is None else counts.keys()
        turns = [self._turn(queues, d, first_round) for d in taking_part if queues[d]]
        heapq.heapify(turns)
        shortcut = queues is self.queues and not self.snapshot.explain
        while turns:
            department = turns[0][-1]  # the next turn's; its key is replaced (or removed) once it went
            queue = queues[department]
            if shortcut and department in self.heads and self.occupancy.free_units <= 0:
                # Nothing is free and nothing frees up within a cycle: the rest of this queue (past the first round's
                # count too) waits as it is (positions then group by department, which a simulation does not need).
                self._all_behind_head(department)
                heapq.heappop(turns)
                continue
            decide(queue.popleft())
            if counts is not None:
                counts[department] -= 1
                if not counts[department]:
                    heapq.heappop(turns)
                    continue
            if queue:
                heapq.heapreplace(turns, self._turn(queues, department, first_round))
            else:
                heapq.heappop(turns)

    def _turn(
        self, queues: dict[str, deque[PendingJob]], department: str, first_round: bool
    ) -> tuple[bool, float, int, float, str]:
        """A department's place in the turns, by its next job: in the first round, one that would start on borrowed
        GPUs (its quota would let it) comes after those that need none; then fair share, priority, submit time."""
        ledger, job = self.ledger, queues[department][0]
        borrows = (
            first_round
            and not ledger.within_nominal(department, job.gpus)
            and ledger.refusal(department, job.gpus, may_borrow=job.preemptible) is None
        )
        return (borrows, ledger.share(department), -job.priority, job.submitted_at, department)

    def _may_start(self, job: PendingJob) -> bool:
        """Enough GPUs free in the pool (anywhere), and its quota lets it start now (nothing borrows while GPUs are
        reclaimed for a guaranteed job)."""
        if job.gpus * FULL > self.occupancy.free_units + 1e-6:
            return False
        if self.reclaiming_for is not None and not self.ledger.within_nominal(job.department, job.gpus):
            return False
        return self.ledger.refusal(job.department, job.gpus, may_borrow=job.preemptible) is None

    def _admit_if_fits(self, job: PendingJob) -> bool:
        if not self._may_start(job):
            return False
        # The occupancy changes only with admissions and booked rooms within a cycle (searches put back what they
        # try): a shape that did not fit since then does not fit now.
        pins = self._pins(job)
        shape = (job.workers, job.gpus_per_worker, pins, len(self.decisions.admissions), len(self.booked))
        if shape in self._no_fit:
            return False
        slots = self.occupancy.place(job.workers, job.gpus_per_worker, prefer=self.pinned if pins else ())
        if slots is None:
            self._no_fit.add(shape)
            return False
        if not job.preemptible:
            self.pinned.update(slot.node for slot in slots)
        borrowed = max(0.0, self.ledger.usage[job.department] + job.gpus - self.ledger.nominal(job.department))
        self.ledger.add(job.department, job.gpus, fixed=not job.preemptible)
        if self.after_stop is not None:
            self.after_stop.retake(slots)
            assert self.after_stop_ledger is not None  # made together with after_stop
            self.after_stop_ledger.add(job.department, job.gpus, fixed=not job.preemptible)
        end = self.now + job.max_runtime if job.max_runtime else None
        self.releases.book(end, job.gpus)
        for head in self.heads.values():  # what is booked at each blocked head's shadow time
            if head.shadow is not None and (end is None or end > head.shadow):
                head.at_shadow += job.gpus
        self.decisions.admissions.append(
            Admission(job_id=job.job_id, slots=tuple(slots), borrowed=min(borrowed, job.gpus))
        )
        return True

    def _try(self, job: PendingJob, head: bool = True) -> None:
        # A job like one that found no room since the cycle last changed (nothing admitted, evicted or booked) finds
        # none either: the same reason and message, without placing again. Everything the answer depends on is in
        # the key; no message names the job itself. With the same search budgets left the answer is the same; and
        # where that job's eviction or move search failed, this one's would too (less budget can only search less),
        # so it does not spend what is left of the budget: identical jobs at the head of a long queue used to take
        # all of it.
        shape = (
            job.department,
            job.workers,
            job.gpus_per_worker,
            job.preemptible,
            job.priority,
            job.attained,
            job.nominated,
            None if self.reclaiming_for is None else self.reclaiming_for.job_id,
        )
        state = (len(self.decisions.admissions), len(self.decisions.preemptions), len(self.booked))
        budgets = (self.searches_left, self.moves_left)
        found = self._no_room.get((shape, state, budgets)) or self._no_room.get((shape, state))
        if found is None:
            found = self._place_or_make_room(job)
            if found is None:
                return  # admitted
            if state == (len(self.decisions.admissions), len(self.decisions.preemptions), len(self.booked)):
                searched = budgets != (self.searches_left, self.moves_left)
                self._no_room[(shape, state) if searched else (shape, state, budgets)] = found
        reason, message = found
        self.waiting.append((job.job_id, reason, message))
        if not head:
            return
        self.head_reasons[job.department] = reason
        shadow = None if reason in ("borrowing_limit", "quota_exhausted") else self.releases.first_free(job.gpus)
        self.heads[job.department] = Head(job, shadow, self.releases.in_use_at(shadow) if shadow is not None else 0.0)

    def _place_or_make_room(self, job: PendingJob) -> tuple[str, str] | None:
        """None if ``job`` was admitted, else why it waits (after making room for it where that is possible)."""
        if self._pins(job):
            packed = self._pack(job)
            if packed is not None:
                return packed
        if self._admit_if_fits(job):
            return None
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
        return reason, message

    def _pack(self, job: PendingJob) -> tuple[str, str] | None:
        """Before ``job`` (``_pins``) takes a node that no such work holds yet, make room for it on one that does, by
        moving preemptible work off it (moves.find_packing); why it then waits, or None where it is placed as
        usual (it fits on such a node already, or none can be cleared, or it may not start anyway)."""
        if self.moves_left <= 0 or not self.pinned or not self._may_start(job):
            return None
        slots = self.occupancy.place(job.workers, job.gpus_per_worker, prefer=self.pinned)
        if slots is None:
            return None
        self.occupancy.release(slots)
        if all(slot.node in self.pinned for slot in slots):
            return None
        self.moves_left -= 1
        victims = find_packing(
            job, self.ledger, self.occupancy, self._on_node(), self._evictable_ids(), self.pinned, self.now
        )
        if not victims:
            return None
        names = []
        for victim, why in victims:
            self._evict(victim, why, job, packing=True)
            names.append(f"#{victim.job_id} ({victim.department}, {why})")
        self._book(job)
        return "preemption_in_progress", (
            f"Moving {', '.join(names)} to make room for it beside other work that cannot be preempted; it starts "
            "when they stop."
            if self.snapshot.explain
            else ""
        )

    def _behind_blocked_head(self, job: PendingJob) -> None:
        blocked = self.heads[job.department]
        head, shadow, at_shadow = blocked.job, blocked.shadow, blocked.at_shadow
        mode = self.snapshot.fifo.get(job.department)
        within = self.ledger.within_nominal
        booked = head.job_id in self.booked_ids
        head_gpus = 0.0 if booked else head.gpus  # a booked head's GPUs are in the ledger already
        if (
            mode != STRICT_FIFO
            and within(job.department, job.gpus)
            and (within(job.department, job.gpus + head_gpus) or not within(head.department, head_gpus) or not booked)
        ):
            # Guaranteed, and the head is not (or both are, together; or no room is booked for the head: it found
            # none, or only counts on GPUs that stopping jobs free for whoever is first next cycle): it does not
            # wait behind the head, and may reclaim like a head.
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
