"""Roughly when a waiting job will start: the queue simulated forward on GPU counts.

Running jobs are assumed to run until their runtime limit (the only duration
the portal knows); a job without a limit never frees its GPUs in this
estimate. Quotas and node shapes are ignored, so this is an estimate, not a
promise. It also gives the "shadow time" of a blocked head, which best-effort
FIFO uses to let smaller jobs run without delaying it (EASY backfilling).
"""

from __future__ import annotations

import math

Interval = tuple[float, float, float]  # start, end (math.inf if unbounded), GPUs

ESTIMATED_PER_POOL = 200  # enough for any queue a person reads; keeps big cycles fast


def earliest_start(intervals: list[Interval], need: float, capacity: float, now: float, runtime: float | None) -> float | None:
    """The first moment from ``now`` at which ``need`` GPUs stay free for ``runtime`` seconds."""
    ends = sorted({now, *(end for _, end, _ in intervals if now < end < math.inf)})
    duration = runtime if runtime else math.inf
    for start in ends:
        finish = start + duration
        points = [start, *(s for s, _, _ in intervals if start < s < finish)]
        peak = max(sum(g for s, e, g in intervals if s <= point < e) for point in points)
        if peak + need <= capacity + 1e-9:
            return start
    return None


def estimate_starts(intervals: list[Interval], queue: list, capacity: float, now: float) -> dict[int, float | None]:
    """job id -> estimated start for the first jobs of a queue in admission order."""
    booked = list(intervals)
    estimates: dict[int, float | None] = {}
    for job in queue[:ESTIMATED_PER_POOL]:
        start = earliest_start(booked, job.gpus, capacity, now, job.max_runtime)
        estimates[job.job_id] = start
        if start is not None:
            booked.append((start, start + job.max_runtime if job.max_runtime else math.inf, job.gpus))
    return estimates
