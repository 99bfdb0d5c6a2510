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
import math
from typing import Any

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
