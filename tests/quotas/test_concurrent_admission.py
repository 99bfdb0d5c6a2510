"""Many submissions at once never over-admit: the scheduling cycle is serialised across connections."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections

from accounts.models import Department
from clusters.models import Cluster, GpuPool
from jobs.models import Job
from jobs.services import job_submit
from quotas.models import Quota

SUBMISSIONS = 200
ROOM = 10


@pytest.mark.django_db(transaction=True)
def test_200_concurrent_submissions_into_room_for_10_admit_exactly_10(world):
    # A local cluster: one that takes jobs (a Kubernetes one without connection settings is refused at once).
    cluster = Cluster.objects.create(name="race", backend="local", settings={})
    pool = GpuPool.objects.create(cluster=cluster, gpu_type="A100", nodes=1, gpus_per_node=ROOM)
    Quota.objects.create(department=Department.objects.get(slug="vision"), pool=pool, nominal=ROOM, borrowing_limit=0)
    data = {
        "name": "race",
        "department": "vision",
        "cluster": "race",
        "code_url": "https://h/r.git",
        "command": "true",
        "image": "python",
        "requirements": [],
        "workers": 1,
        "gpus_per_worker": 1,
        "priority": "normal",
        "mounts": [],
        "env": {},
        "tensorboard": False,
    }

    def submit(_):
        try:
            return job_submit(user=world.alice, data=dict(data))[0].pk
        finally:
            connections.close_all()

    # PostgreSQL takes every submission truly in parallel; SQLite lets one writer in at a time anyway.
    threads = 32 if connection.vendor == "postgresql" else 8
    with ThreadPoolExecutor(max_workers=threads) as pool_executor:
        ids = list(pool_executor.map(submit, range(SUBMISSIONS)))
    assert len(set(ids)) == SUBMISSIONS
    admitted = Job.objects.filter(cluster=cluster, status="admitted")
    assert admitted.count() == ROOM
    gpus = [gpu for job in admitted for slot in job.placement for gpu in slot["gpus"]]
    assert sorted(gpus) == list(range(ROOM))  # every GPU given once
    assert Job.objects.filter(cluster=cluster, status="queued").count() == SUBMISSIONS - ROOM
