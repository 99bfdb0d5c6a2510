"""Roughly when a waiting job will start: the queue simulated forward on GPU counts.

Running jobs are assumed to run until their runtime limit (the latest they can hold their GPUs; jobs still
setting up may also take their setup time); a job without a limit never frees its GPUs in this estimate, and one
past its limit frees them "now", never in the past. Waiting jobs start in admission order, so every booked
interval has started by the time the next job is considered: from then on GPUs are only released, and the first
moment enough are free is the start. Quotas and node shapes are ignored, so this is an estimate, not a promise.
It also gives the "shadow time" of a blocked head, which best-effort FIFO uses to let smaller jobs run without
delaying it (EASY backfilling).

The same walk gives a second, likely estimate (``likely_starts``): running jobs end when jobs like them usually
end (``RunningJob.expected_end``) and the others run as long as jobs like them usually run
(``PendingJob.expected_runtime``), where history knows (jobs.runtimes). Neither estimate is before the
department's quota lets the job in (``QuotaFloor``); ``StartRanges`` puts the two together as "likely 14:20, at
the latest 16:00".
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import defaultdict
from typing import Any

from quotas.scheduler.types import Decisions, PendingJob, RunningJob, Snapshot

ESTIMATED_PER_POOL = 200  # enough for any queue a person reads; keeps big cycles fast
QUOTA_REASONS = ("quota_exhausted", "borrowing_limit")  # waits for its own department's GPUs, not the pool's
# Waits for them too: behind its department's head, it starts no earlier than that department's quota lets it in
# (the pool may have room that the estimate on GPU counts would otherwise hand it "now").
FLOORED_REASONS = (*QUOTA_REASONS, "lower_in_queue")


class Releases:
    """GPUs in use from a moment on, and the sorted moments they are released."""

    def __init__(self, capacity: float, now: float):
        self.capacity = capacity
        self.time = now
        self.in_use = 0.0  # booked and not yet released at self.time
        self.ends: list[tuple[float, float]] = []  # (end, GPUs) of bookings that end after self.time
        self.cursor = 0  # ends[:cursor] are released by self.time

    def book(self, end: float | None, gpus: float) -> None:
        """Take ``gpus`` from ``self.time`` until ``end`` (None: for good).

        An end already past (a job over its limit, still stopping) counts as "any moment now": it must
        not make a waiting job's estimate, or a blocked head's shadow time, earlier than now.
        """
        self.in_use += gpus
        if end is not None and end < math.inf:
            bisect.insort(self.ends, (max(end, self.time), gpus), lo=self.cursor)

    def first_free(self, need: float) -> float | None:
        """The first moment from ``self.time`` at which ``need`` GPUs are free, if nothing else starts meanwhile."""
        free = self.capacity - self.in_use
        if free + 1e-9 >= need:
            return self.time
        for index in range(self.cursor, len(self.ends)):  # no slicing: ends can be long
            end, gpus = self.ends[index]
            free += gpus
            if free + 1e-9 >= need:
                return end
        return None

    def in_use_at(self, moment: float) -> float:
        released = 0.0
        for index in range(self.cursor, len(self.ends)):
            end, gpus = self.ends[index]
            if end > moment:
                break
            released += gpus
        return self.in_use - released

    def advance(self, moment: float) -> None:
        while self.cursor < len(self.ends) and self.ends[self.cursor][0] <= moment:
            self.in_use -= self.ends[self.cursor][1]
            self.cursor += 1
        self.time = moment

    def copy(self) -> Releases:
        clone = Releases(self.capacity, self.time)
        clone.in_use, clone.ends, clone.cursor = self.in_use, list(self.ends), self.cursor
        return clone


def expected_end(
    *, admitted_at: float, running_since: float | None, max_runtime: float | None, setup_seconds: float
) -> float | None:
    """When a job holding GPUs gives them back at the latest, by its limits (None: it has no runtime limit).

    ``max_runtime`` counts from when it runs; before that (admitted, starting) its clone and environment
    build may take up to ``setup_seconds`` from admission, and the GPUs are held meanwhile.
    """
    if not max_runtime:
        return None
    if running_since is not None:
        return running_since + max_runtime
    return admitted_at + setup_seconds + max_runtime


def likely_end(*, began: float, now: float, runtime: float, limit: float | None) -> float:
    """When a job holding GPUs since ``began`` likely gives them back, if jobs like it ran ``runtime`` seconds.

    One that has already run longer than that is expected to run one such runtime more from now, rather than to
    end "any moment" (which would promise its GPUs to every waiting job); never past its limit.
    """
    ran = max(0.0, now - began)
    end = began + runtime if ran < runtime else now + runtime
    return min(end, began + limit) if limit else end


def likely_deadline(job: RunningJob) -> float | None:
    """When a running job likely gives its GPUs back: its expected end where history knows one, never after its
    deadline (None: never)."""
    if job.expected_end is None:
        return job.deadline
    return job.expected_end if job.deadline is None else min(job.expected_end, job.deadline)


def likely_runtime(job: PendingJob) -> float | None:
    """How long a waiting job likely runs: its expected runtime where history knows one, else its limit."""
    return job.max_runtime if job.expected_runtime is None else job.expected_runtime


def with_expected_runtimes(snapshot: Snapshot) -> Snapshot:
    """The snapshot with likely durations instead of limits: running jobs end at ``likely_deadline`` and waiting
    jobs run for ``likely_runtime``; jobs without expectations keep their limits.

    For estimates only ("likely 14:20"): the cycle that decides admissions keeps the limits, which are the
    latest a job can hold its GPUs ("at the latest 16:00").
    """
    running = tuple(
        dataclasses.replace(job, deadline=likely_deadline(job)) if job.expected_end is not None else job
        for job in snapshot.running
    )
    pending = tuple(
        dataclasses.replace(job, max_runtime=job.expected_runtime) if job.expected_runtime is not None else job
        for job in snapshot.pending
    )
    return dataclasses.replace(snapshot, running=running, pending=pending)


def has_expectations(snapshot: Snapshot) -> bool:
    """Whether history knows anything about the snapshot's jobs: without it the likely estimate is the latest."""
    return any(job.expected_runtime is not None for job in snapshot.pending) or any(
        job.expected_end is not None for job in snapshot.running
    )


def likely_starts(snapshot: Snapshot, decisions: Decisions, *, now: float) -> dict[int, float | None]:
    """job id -> the likely start of each waiting job, from the cycle's own ``decisions`` on ``snapshot``.

    The cycle's estimate walked again (``estimate_starts`` over the same queue, after the same admissions), with
    likely durations: running jobs end at ``likely_deadline``, admitted and waiting jobs run ``likely_runtime``.
    What is admitted and in which order stays the cycle's decision on the limits; only the durations change. As
    cheap as the cycle's own estimate: the pool's running jobs booked once, at most ESTIMATED_PER_POOL per pool.
    """
    if not snapshot.explain or not decisions.waiting:
        return {}
    by_id = {job.job_id: job for job in snapshot.pending}
    queues: dict[int, list[PendingJob]] = defaultdict(list)
    for waiting in decisions.waiting:
        job = by_id[waiting.job_id]
        queues[job.pool_id].append(job)
    releases = {pool_id: Releases(float(snapshot.pools[pool_id].total), now) for pool_id in queues}
    for run in snapshot.running:
        if run.pool_id in releases:
            releases[run.pool_id].book(likely_deadline(run), run.gpus)
    for admission in decisions.admissions:
        admitted = by_id[admission.job_id]
        if admitted.pool_id in releases:
            runtime = likely_runtime(admitted)
            releases[admitted.pool_id].book(now + runtime if runtime else None, admitted.gpus)
    estimates: dict[int, float | None] = {}
    for pool_id, queue in queues.items():
        estimates.update(estimate_starts(releases[pool_id], queue, likely=True))
    return estimates


def quota_allows_at(
    *, running: list[Any], department: str, need: float, allowed: float | None, now: float
) -> float | None:
    """The first moment from ``now`` at which ``department``'s running jobs leave room for ``need`` more GPUs
    within ``allowed`` (its nominal quota for a job that may not borrow, nominal plus borrowing limit for one
    that may; None: no limit, so now). Running jobs end at their ``deadline`` (None: never), and one already
    terminating or past its end counts as ending now. ``running`` are the pool's RunningJobs.

    The GPU-count estimate above ignores quotas: a quota-blocked job in an idle pool would read "now". The
    start is at least this moment; jobs of the same department waiting ahead of it may push it later still.
    """
    if allowed is None:
        return now
    return _room_at(_ends([job for job in running if job.department == department], now=now), need, allowed, now)


def _ends(running: list[Any], *, now: float, likely: bool = False) -> list[tuple[float, float]]:
    """(end, GPUs) of these running jobs, sorted: terminating or past its end counts as now, no end as never."""
    ends: list[tuple[float, float]] = []
    for job in running:
        deadline = likely_deadline(job) if likely else job.deadline
        if job.terminating:
            end = now
        elif deadline is None:
            end = math.inf
        else:
            end = max(deadline, now)
        ends.append((end, job.gpus))
    ends.sort()
    return ends


def _room_at(ends: list[tuple[float, float]], need: float, allowed: float, now: float) -> float | None:
    used = sum(gpus for _end, gpus in ends)
    if used + need <= allowed + 1e-9:
        return now
    for end, gpus in ends:
        if end == math.inf:
            return None
        used -= gpus
        if used + need <= allowed + 1e-9:
            return end
    return None


class QuotaFloor:
    """``quota_allows_at`` for many waiting jobs of one snapshot: each department's running jobs in each pool
    sorted once (when first asked), each answer kept by (pool, department, GPUs, allowance). ``likely``: running
    jobs end at ``likely_deadline`` (the likely estimate's floor), else at their deadline (the latest's)."""

    def __init__(self, snapshot: Snapshot, *, now: float, likely: bool = False):
        self.snapshot, self.now, self.likely = snapshot, now, likely
        self.quotas = {(quota.pool_id, quota.department): quota for quota in snapshot.quotas}
        self._running: dict[tuple[int, str], list[RunningJob]] | None = None
        self._ends: dict[tuple[int, str], list[tuple[float, float]]] = {}
        self._answers: dict[tuple[int, str, float, float | None], float | None] = {}

    def not_before(self, job: PendingJob, reason: str, estimate: float | None) -> float | None:
        """The estimate, but not before the job's department's quota lets it in; None when it never does (as far
        as the running jobs' ends are known). Only for jobs waiting on their quota or behind their department's
        head (FLOORED_REASONS); where the quota has room now the floor is now."""
        if estimate is None or reason not in FLOORED_REASONS:
            return estimate
        quota = self.quotas.get((job.pool_id, job.department))
        if quota is None:
            return None
        allowed: float | None
        if not job.preemptible:  # within its own nominal (a loan's GPUs only take preemptible work)
            allowed = quota.nominal if quota.fixed_nominal is None else quota.fixed_nominal
        else:
            allowed = None if quota.borrowing_limit is None else quota.nominal + quota.borrowing_limit
        if allowed is None:
            return estimate
        key = (job.pool_id, job.department, job.gpus, allowed)
        if key not in self._answers:
            self._answers[key] = _room_at(self._sorted_ends(job.pool_id, job.department), job.gpus, allowed, self.now)
        floor = self._answers[key]
        return None if floor is None else max(estimate, floor)

    def _sorted_ends(self, pool_id: int, department: str) -> list[tuple[float, float]]:
        if self._running is None:
            self._running = defaultdict(list)
            for run in self.snapshot.running:
                self._running[(run.pool_id, run.department)].append(run)
        key = (pool_id, department)
        if key not in self._ends:
            self._ends[key] = _ends(self._running.get(key, []), now=self.now, likely=self.likely)
        return self._ends[key]


class StartRanges:
    """A waiting job's start as a range, "likely 14:20, at the latest 16:00", for the jobs of one snapshot."""

    def __init__(self, snapshot: Snapshot, *, now: float):
        self.now = now
        self.latest_floor = QuotaFloor(snapshot, now=now)
        self.likely_floor = QuotaFloor(snapshot, now=now, likely=True)

    def of(
        self, job: PendingJob, reason: str, *, latest: float | None, likely: float | None
    ) -> tuple[float | None, float | None]:
        """(likely, at the latest) from the estimate on the limits (``latest``) and the one on likely durations
        (``likely``; None: nothing known beyond the limits): neither before the quota lets the job in
        (QuotaFloor) nor before now, and the likely one never after the latest one."""
        latest = self.latest_floor.not_before(job, reason, latest)
        likely = self.likely_floor.not_before(job, reason, likely)
        if likely is None or (latest is not None and likely > latest):
            likely = latest
        return (
            None if likely is None else max(likely, self.now),
            None if latest is None else max(latest, self.now),
        )


def estimate_starts(releases: Releases, queue: list[Any], *, likely: bool = False) -> dict[int, float | None]:
    """job id -> estimated start for the first jobs of a queue in admission order (``releases`` is not changed);
    ``likely``: each runs ``likely_runtime``, else its limit."""
    releases = releases.copy()
    estimates: dict[int, float | None] = {}
    for job in queue[:ESTIMATED_PER_POOL]:
        start = releases.first_free(job.gpus)
        estimates[job.job_id] = start
        if start is None:
            break  # nothing behind a job that never starts gets an estimate either
        releases.advance(start)
        runtime = likely_runtime(job) if likely else job.max_runtime
        releases.book(start + runtime if runtime else None, job.gpus)
    return estimates
