"""Roughly when a waiting job will start: the queue simulated forward on GPU counts.

Running jobs are assumed to run until their runtime limit (the only duration
the portal knows; jobs still setting up may also take their setup time); a job
without a limit never frees its GPUs in this estimate, and one past its limit
frees them "now", never in the past. Waiting jobs start in admission order, so every booked interval has
started by the time the next job is considered: from then on GPUs are only
released, and the first moment enough are free is the start. Quotas and node
shapes are ignored, so this is an estimate, not a promise. It also gives the
"shadow time" of a blocked head, which best-effort FIFO uses to let smaller
jobs run without delaying it (EASY backfilling).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Any

from quotas.scheduler.types import Snapshot

ESTIMATED_PER_POOL = 200  # enough for any queue a person reads; keeps big cycles fast


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


def with_expected_runtimes(snapshot: Snapshot, *, ends: dict[int, float], runtimes: dict[int, float]) -> Snapshot:
    """The snapshot with likely durations instead of limits: running jobs end at ``ends`` (job id -> expected end)
    and waiting jobs run for ``runtimes`` (job id -> seconds); jobs in neither keep their limits.

    For estimates only ("likely 14:20"): the cycle that decides admissions keeps the limits, which are the
    latest a job can hold its GPUs ("at the latest 16:00").
    """
    running = tuple(
        dataclasses.replace(job, deadline=min(ends[job.job_id], job.deadline or math.inf))
        if job.job_id in ends
        else job
        for job in snapshot.running
    )
    pending = tuple(
        dataclasses.replace(job, max_runtime=runtimes[job.job_id]) if job.job_id in runtimes else job
        for job in snapshot.pending
    )
    return dataclasses.replace(snapshot, running=running, pending=pending)


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
    ends: list[tuple[float, float]] = []
    for job in running:
        if job.department != department:
            continue
        if job.terminating:
            end = now
        elif job.deadline is None:
            end = math.inf
        else:
            end = max(job.deadline, now)
        ends.append((end, job.gpus))
    ends.sort()
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


def estimate_starts(releases: Releases, queue: list[Any]) -> dict[int, float | None]:
    """job id -> estimated start for the first jobs of a queue in admission order (``releases`` is not changed)."""
    releases = releases.copy()
    estimates: dict[int, float | None] = {}
    for job in queue[:ESTIMATED_PER_POOL]:
        start = releases.first_free(job.gpus)
        estimates[job.job_id] = start
        if start is None:
            break  # nothing behind a job that never starts gets an estimate either
        releases.advance(start)
        releases.book(start + job.max_runtime if job.max_runtime else None, job.gpus)
    return estimates
