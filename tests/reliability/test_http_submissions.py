"""200 submissions at once over HTTP into a department with room for 10: exactly 10 admitted, 190 queued,
none lost, none duplicated — through a real uvicorn process, the way automation hits the portal.

Some clients retry (as clients do after a timeout) with the same Idempotency-Key: the retry must get the
same job back, never a second one.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection

from accounts.models import Department
from accounts.tokens import token_create
from clusters.models import Cluster, GpuPool
from jobs.models import Job
from quotas.models import Quota
from tests.processes import Processes

SUBMISSIONS = 200
ROOM = 10
RETRIED = 20  # clients that send their request a second time with the same key


@pytest.fixture
def processes(tmp_path):
    running = Processes(tmp_path)
    running.migrate_channel_layer()
    yield running
    running.stop()


@pytest.mark.django_db(transaction=True)
def test_200_concurrent_http_submissions_into_room_for_10(world, processes):
    # A cluster that takes jobs but nobody launches on (no worker runs): admission is all that happens. (A
    # Kubernetes cluster without connection settings would be refused at once: clusters/health.py.)
    cluster = Cluster.objects.create(name="race", backend="local", settings={})
    pool = GpuPool.objects.create(cluster=cluster, gpu_type="A100", nodes=1, gpus_per_node=ROOM)
    Quota.objects.create(department=Department.objects.get(slug="vision"), pool=pool, nominal=ROOM, borrowing_limit=0)
    port = processes.web()
    tokens = [token_create(user=user, name="race")[1] for user in (world.alice, world.carol)]
    keys = [str(uuid.uuid4()) for _ in range(SUBMISSIONS)]
    body = {
        "name": "race",
        "department": "vision",
        "cluster": "race",
        "code_url": "https://git.example.com/r.git",
        "command": "python train.py",
        "image": "python",
        "gpus_per_worker": 1,
    }

    def submit(index: int) -> list[tuple[int, dict]]:
        headers = {"Authorization": f"Token {tokens[index % 2]}", "Idempotency-Key": keys[index]}
        answers = []
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            for _ in range(2 if index < RETRIED else 1):
                response = client.post("/api/v1/jobs/", json={**body, "name": f"race-{index}"}, headers=headers)
                answers.append((response.status_code, response.json()))
        return answers

    threads = 32 if connection.vendor == "postgresql" else 8  # SQLite admits one writer at a time anyway
    with ThreadPoolExecutor(max_workers=threads) as executor:
        answers = list(executor.map(submit, range(SUBMISSIONS)))

    firsts = [answer[0] for answer in answers]
    assert [status for status, _ in firsts] == [201] * SUBMISSIONS, [a for a in firsts if a[0] != 201][:3]
    for index in range(RETRIED):  # the retry answers with the job the first request made
        (_, first), (status, again) = answers[index]
        assert status == 200 and again["id"] == first["id"]  # 200: the existing job, not a new one
    ids = {first["id"] for _, first in firsts}
    assert len(ids) == SUBMISSIONS  # one job per key: none lost, none duplicated

    jobs = Job.objects.filter(cluster=cluster)
    assert jobs.count() == SUBMISSIONS and set(jobs.values_list("pk", flat=True)) == ids
    admitted = jobs.filter(status="admitted")
    assert admitted.count() == ROOM
    assert sorted(gpu for job in admitted for slot in job.placement for gpu in slot["gpus"]) == list(range(ROOM))
    assert jobs.filter(status="queued").count() == SUBMISSIONS - ROOM
    assert sorted(jobs.values_list("name", flat=True)) == sorted(f"race-{index}" for index in range(SUBMISSIONS))
