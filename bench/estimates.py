"""How good are estimated starts? (issue 18 item 4; ``python -m bench.replay ... --estimates``.)

While the replay runs, every job that has to wait when it arrives gets two estimates of its start, made at that
moment from what the portal would know then (never the trace's durations of jobs still running):
- ``limits`` (the portal's estimator before issue 18): every running and waiting job runs to its runtime limit,
  the portal's default 7 days (the trace gives no limits);
- ``history`` (issue 18): each job runs as long as the jobs of the same department and size (GPUs) that finished
  before it did on average (jobs.runtimes' second rule: the trace has no users or commands), its limit without any;
  a running job already past that is expected to run as long again (quotas.scheduler.eta.likely_end); and no job
  starts before its department's quota lets it in (quotas.scheduler.eta.quota_allows_at).
Both run the scheduler's own ``schedule(snapshot, now)`` with ``explain=True`` on the replay's state, so they
respect node shapes and the queue order as the portal does. For the jobs that waited at least 10 minutes the
report gives the median and p90 of |estimated start - actual start| / actual wait, how many got no estimate
at all (a start never reached in the simulation, or beyond the 200 the scheduler estimates per pool), and how many
were told "now" (within a minute) although they then waited (an error of 1: waits the estimate does not model).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import defaultdict

from bench.common import percentile
from bench.replay import HEADS_PER_DEPARTMENT, Replay, SimJob
from quotas.scheduler import schedule
from quotas.scheduler.eta import likely_end, quota_allows_at

LIMIT_SECONDS = 7 * 24 * 3600  # jobs.submission.DEFAULT_MAX_RUNTIME_SECONDS
MIN_WAIT_SECONDS = 600
ESTIMATORS = ("limits", "history")


class EstimatingReplay(Replay):
    """The replay, and after each moment's cycles the two estimates for the jobs that arrived then and wait."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.estimates: dict[str, dict[int, float | None]] = {name: {} for name in ESTIMATORS}
        self.finished_runtimes: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0])
        self._was_running: set[int] = set()
        self._by_id = {job.job_id: job for job in self.jobs}
        self._arrived_at: float | None = None
        self.estimate_seconds = 0.0

    def _cycle(self, now: float) -> bool:
        for job_id in self._was_running - set(self.running):
            ended = self._by_id[job_id]
            if ended.finished is not None:  # not preempted: its whole runtime is known now
                total = self.finished_runtimes[(ended.department, ended.gpus)]
                total[0] += ended.duration
                total[1] += 1
        again = super()._cycle(now)
        self._was_running = set(self.running)
        if not again:
            self._estimate_arrivals(now)
        return again

    def _estimate_arrivals(self, now: float) -> None:
        if self._arrived_at == now:
            return
        self._arrived_at = now
        arrived = [
            job
            for waiting in self.pending.values()
            for job in waiting.values()
            if job.submitted == now and job.first_start is None
        ]
        if not arrived:
            return
        started = time.perf_counter()
        heads: dict[int, SimJob] = {}
        for waiting in self.pending.values():
            ordered = sorted(waiting.values(), key=lambda j: (-j.priority, j.submitted, j.job_id))
            heads.update((job.job_id, job) for job in ordered[: 4 * HEADS_PER_DEPARTMENT])
        heads.update((job.job_id, job) for job in arrived)
        for name in ESTIMATORS:
            found = self._estimates(name, list(heads.values()), arrived, now)
            self.estimates[name].update(found)
        self.estimate_seconds += time.perf_counter() - started

    def _runtime(self, name: str, job: SimJob) -> float:
        if name == "limits":
            return LIMIT_SECONDS
        total, runs = self.finished_runtimes.get((job.department, job.gpus), (0.0, 0))
        return min(total / runs, LIMIT_SECONDS) if runs else LIMIT_SECONDS

    def _end(self, name: str, job: SimJob, now: float) -> float:
        if name == "limits":
            return job.started + LIMIT_SECONDS
        return likely_end(began=job.started, now=now, runtime=self._runtime(name, job), limit=LIMIT_SECONDS)

    def _estimates(self, name: str, heads: list[SimJob], arrived: list[SimJob], now: float) -> dict:
        running = tuple(
            dataclasses.replace(job.running_view, deadline=self._end(name, job, now))
            for job in self.running.values()
            if job.running_view is not None
        )
        pending = tuple(
            dataclasses.replace(self._pending_view(job), max_runtime=self._runtime(name, job)) for job in heads
        )
        snapshot = self._snapshot(pending, running, explain=True)
        decisions = schedule(snapshot, now=now)
        by_job = {waiting.job_id: waiting.estimated_start for waiting in decisions.waiting}
        admitted = {admission.job_id for admission in decisions.admissions}
        found: dict[int, float | None] = {}
        for job in arrived:
            estimate = now if job.job_id in admitted else by_job.get(job.job_id)
            if name == "history" and estimate is not None and not job.preemptible:
                nominal = next((q.nominal for q in self.quotas if q.department == self.view(job)), None)
                floor = quota_allows_at(
                    running=list(running), department=self.view(job), need=float(job.gpus), allowed=nominal, now=now
                )
                estimate = None if floor is None else max(estimate, floor)
            found[job.job_id] = estimate
        return found


def estimate_report(replay: EstimatingReplay) -> dict:
    """Median and p90 of |estimate - actual start| / actual wait for the jobs that waited at least 10 minutes."""
    waited = [
        job
        for job in replay.jobs
        if job.first_start is not None
        and job.first_start - job.submitted >= MIN_WAIT_SECONDS
        and job.job_id in replay.estimates["limits"]
    ]
    report: dict = {"jobs_waited_10_min": len(waited), "estimate_seconds": round(replay.estimate_seconds, 1)}
    for name in ESTIMATORS:
        errors, missing, said_now = [], 0, 0
        for job in waited:
            estimate = replay.estimates[name][job.job_id]
            assert job.first_start is not None
            if estimate is None or math.isinf(estimate):
                missing += 1
                continue
            said_now += estimate - job.submitted < 60  # "now" for a job that then waited 10 minutes or more
            errors.append(abs(estimate - job.first_start) / (job.first_start - job.submitted))
        report[name] = {
            "median_relative_error": round(percentile(errors, 0.5), 3) if errors else None,
            "p90_relative_error": round(percentile(errors, 0.9), 3) if errors else None,
            "no_estimate": missing,
            "said_now": said_now,
        }
    return report
