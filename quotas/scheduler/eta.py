"""Roughly when a waiting job will start: the queue simulated forward on GPU counts.

Running jobs are assumed to run until their runtime limit (the only duration
the portal knows); a job without a limit never frees its GPUs in this
estimate. Waiting jobs start in admission order, so every booked interval has
started by the time the next job is considered: from then on GPUs are only
released, and the first moment enough are free is the start. Quotas and node
shapes are ignored, so this is an estimate, not a promise. It also gives the
"shadow time" of a blocked head, which best-effort FIFO uses to let smaller
jobs run without delaying it (EASY backfilling).
"""

from __future__ import annotations

import bisect
import math

Interval = tuple[float, float, float]  # start, end (math.inf if unbounded), GPUs

ESTIMATED_PER_POOL = 500  # enough for any queue a person reads; keeps big cycles fast


class _Releases:
    """GPUs in use from ``now`` on, as a sorted list of the moments they are released."""

    def __init__(self, intervals: list[Interval], now: float):
        self.in_use = sum(g for _, end, g in intervals if end > now)
        self.ends = sorted((end, g) for _, end, g in intervals if now < end < math.inf)

    def first_free(self, need: float, capacity: float, after: float) -> float | None:
        free = capacity - self.in_use + sum(g for end, g in self.ends if end <= after)
        if free + 1e-9 >= need:
            return after
        for end, gpus in self.ends[bisect.bisect_right(self.ends, (after, math.inf)):]:
            free += gpus
            if free + 1e-9 >= need:
                return end
        return None

    def book(self, start: float, end: float, gpus: float) -> None:
        self.in_use += gpus
        if end < math.inf:
            bisect.insort(self.ends, (end, gpus))


def earliest_start(intervals: list[Interval], need: float, capacity: float, now: float) -> float | None:
    """The first moment from ``now`` at which ``need`` GPUs are free, if nothing else starts meanwhile."""
    return _Releases(intervals, now).first_free(need, capacity, now)


def estimate_starts(intervals: list[Interval], queue: list, capacity: float, now: float) -> dict[int, float | None]:
    """job id -> estimated start, for the first jobs of a queue in admission order."""
    releases = _Releases(intervals, now)
    estimates: dict[int, float | None] = {}
    after = now
    for job in queue[:ESTIMATED_PER_POOL]:
        start = releases.first_free(job.gpus, capacity, after)
        estimates[job.job_id] = start
        if start is None:
            break  # nothing behind a job that never starts gets an estimate either
        after = start
        releases.book(start, start + job.max_runtime if job.max_runtime else math.inf, job.gpus)
    return estimates
