"""Fair share across departments can weigh what each used lately (a cluster setting)."""

import math

import pytest
from django.utils import timezone

from clusters.models import Cluster
from jobs.admission import cycle_snapshot
from jobs.models import Job

JOB = {"name": "fs", "code_url": "https://git.example.com/r.git", "command": "python train.py"}


def submit(world, user, department, **fields):
    response = world.api(user).post("/api/v1/jobs/", {**JOB, "department": department, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def test_it_decays_each_departments_recent_gpu_seconds_into_average_gpus(world):
    day = 86400
    now = timezone.now()
    finished = submit(world, world.alice, "vision", gpus_per_worker=2)
    Job.objects.filter(pk=finished.pk).update(status="succeeded", finished_at=now, gpu_seconds=2 * day)
    older = submit(world, world.alice, "vision", gpus_per_worker=2)
    Job.objects.filter(pk=older.pk).update(
        status="succeeded", finished_at=now - timezone.timedelta(days=1), gpu_seconds=2 * day
    )
    queued = submit(world, world.bob, "nlp", gpus_per_worker=1)

    def recent():
        snapshot, _ = cycle_snapshot(queued=[Job.objects.select_related("pool__cluster").get(pk=queued.pk)])
        pool = snapshot.pools[queued.pool_id]
        return pool.usage_weight, {q.department: q.recent_usage for q in snapshot.quotas}

    assert recent() == (0.0, {"vision": 0.0, "nlp": 0.0})  # off unless the cluster asks
    Cluster.objects.filter(name="local").update(
        settings={"fair_share_usage_weight": 0.5, "fair_share_half_life_hours": 24}
    )
    weight, usage = recent()
    # 2 GPU-days now and 2 GPU-days a half-life ago, over a mean life of 1 day / ln 2
    assert weight == 0.5 and usage["vision"] == pytest.approx((2 + 1) * math.log(2), rel=1e-3) and usage["nlp"] == 0.0
