"""Retention of local jobs' files: a finished job's folders, outputs and logs are deleted PORTAL_JOB_RETENTION_DAYS
after it ended (0 keeps them), and job environments nobody used for PORTAL_JOB_ENV_UNUSED_DAYS are evicted. Runs
periodically (jobs.tasks.clean_up_job_files, CELERY_BEAT_SCHEDULE).

The job row stays, with ``files_removed_at`` set: its page and the API say the files are gone and when. Model
versions registered from a job were copied into the artifact store, so they stay. On Kubernetes the job volume
and the pods' logs are the cluster's (jobs_collect_garbage deletes the objects of jobs the portal no longer knows).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from clusters.models import Cluster
from clusters.services import executor_call
from jobs import lifecycle
from jobs.executors.local import LocalExecutor
from jobs.models import Job
from jobs.running import executor_for

log = logging.getLogger(__name__)

BATCH = 200  # jobs per cluster and run: a backlog is worked off over a few runs


def jobs_files_clean_up(*, now=None) -> dict[str, dict[str, int]]:
    """Per local cluster: how many finished jobs had their files deleted, and how many environments went."""
    now = now or timezone.now()
    days, env_days = settings.PORTAL_JOB_RETENTION_DAYS, settings.PORTAL_JOB_ENV_UNUSED_DAYS
    done = {}
    for cluster in Cluster.objects.filter(backend=Cluster.Backend.LOCAL):
        executor = executor_for(cluster)
        if not isinstance(executor, LocalExecutor):
            continue
        jobs = []
        if days:
            jobs = list(
                Job.objects.filter(
                    cluster=cluster,
                    status__in=lifecycle.FINAL,
                    finished_at__lt=now - timedelta(days=days),
                    files_removed_at__isnull=True,
                ).order_by("finished_at")[:BATCH]
            )
        for job in jobs:
            executor_call(lambda job=job: executor.remove_job_files(job.pk, job.storage_key))
            Job.objects.filter(pk=job.pk, files_removed_at__isnull=True).update(files_removed_at=now)
        envs = executor_call(lambda: executor.evict_envs(env_days * 86400, now=now.timestamp())) if env_days else []
        if jobs or envs:
            log.info(
                "cluster %s: removed the files of %d finished jobs and %d unused environments",
                cluster.name,
                len(jobs),
                len(envs),
            )
        done[cluster.name] = {"jobs": len(jobs), "envs": len(envs)}
    return done
