"""How long a job will likely run, from the jobs that finished before it (docs/architecture.md "Asking before
submitting"): the same user, repository and command first, then the same department and size (workers x GPUs
per worker); with neither, nothing is known and the job's own limit (``max_runtime_seconds``) stays the only
duration. An estimate is never longer than the job's limit.

A finished job's runtime is its GPU-seconds over its GPUs (every run of it, a preempted one's lost work
included). One grouped query reads the history of all the jobs asked about, not one per job.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, F, FloatField, Q, Sum
from django.db.models.functions import Cast
from django.utils import timezone

from jobs import lifecycle
from jobs.models import Job

HISTORY_DAYS = 90  # older runs say little about today's code and data


@dataclass(frozen=True)
class Runtimes:
    """Mean runtimes in seconds: by (user id, code URL, command) and by (department id, workers, GPUs per worker)."""

    by_code: dict[tuple[int, str, str], float] = field(default_factory=dict)
    by_size: dict[tuple[int, int, float], float] = field(default_factory=dict)

    def of(self, job: Job) -> float | None:
        """The job's likely runtime (seconds), at most its limit; None when history knows nothing like it."""
        found = self.by_code.get((job.submitted_by_id, job.code_url, job.command))
        if found is None:
            found = self.by_size.get((job.department_id, job.workers, float(job.gpus_per_worker)))
        if found is None:
            return None
        return min(found, job.max_runtime_seconds) if job.max_runtime_seconds else found


def runtimes_for(jobs: list[Job], *, now: datetime | None = None) -> Runtimes:
    """What the history says about these jobs (saved or not): one grouped query over the jobs finished lately by
    their users or in their departments."""
    if not jobs:
        return Runtimes()
    since = (now or timezone.now()) - timedelta(days=HISTORY_DAYS)
    users = {job.submitted_by_id for job in jobs if job.submitted_by_id is not None}
    departments = {job.department_id for job in jobs}
    gpus = F("workers") * F("gpus_per_worker")
    rows = (
        Job.objects.filter(status=lifecycle.SUCCEEDED, finished_at__gte=since, gpus_per_worker__gt=0, gpu_seconds__gt=0)
        .filter(Q(submitted_by_id__in=users) | Q(department_id__in=departments))
        .order_by()  # the model's ordering would join the GROUP BY
        .values_list("submitted_by_id", "code_url", "command", "department_id", "workers", "gpus_per_worker")
        .annotate(runtime_total=Sum(Cast("gpu_seconds", FloatField()) / gpus), finished_count=Count("id"))
    )
    code: dict[tuple[int, str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    size: dict[tuple[int, int, float], list[float]] = defaultdict(lambda: [0.0, 0])
    for user, code_url, command, department, workers, per_worker, seconds, runs in rows:
        for total in (code[(user, code_url, command)], size[(department, workers, float(per_worker))]):
            total[0] += seconds
            total[1] += runs
    return Runtimes(
        by_code={key: total / runs for key, (total, runs) in code.items()},
        by_size={key: total / runs for key, (total, runs) in size.items()},
    )
