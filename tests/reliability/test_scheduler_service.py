"""The scheduler service as real processes (`manage.py run_scheduler`, PORTAL_SCHEDULER=service) behind a real
uvicorn web process, on the test database: 200 submissions at once into a department with room for 10, then the
same while the leading scheduler is killed with SIGKILL. The web process only records the jobs (every 201 says
queued); the service admits exactly the 10 that fit, none twice, and a standby takes over from a killed leader.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection

from accounts.models import Department
from accounts.tokens import token_create
from clusters.models import Cluster, GpuPool
from core.models import Lease
from jobs import admission
from jobs.models import Job, JobEvent
from quotas.models import Quota
from tests.processes import Processes, wait_for

SUBMISSIONS = 200
ROOM = 10
SERVICE = {"PORTAL_SCHEDULER": "service", "PORTAL_SCHEDULER_LEASE_SECONDS": "2", "PORTAL_HEARTBEAT_SECONDS": "1"}
BODY = {
    "department": "vision",
    "cluster": "race",
    "code_url": "https://git.example.com/r.git",
    "command": "python train.py",
    "image": "python",
    "gpus_per_worker": 1,
}


@pytest.fixture
def processes(tmp_path):
    running = Processes(tmp_path)
    running.migrate_channel_layer()
    yield running
    running.stop()


def scheduler(processes: Processes, name: str):
    return processes.start(name, [sys.executable, "manage.py", "run_scheduler"], SERVICE)


def leader_pid() -> int | None:
    """The pid of the scheduler process that leads now (None: nobody)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.objid = %s",
                [admission.LEADER_LOCK_KEY],
            )
            row = cursor.fetchone()
        return int(row[0].rsplit(":", 1)[1]) if row else None
    lease = Lease.objects.filter(name="scheduler").first()
    if lease is None or lease.expires_at.timestamp() < time.time():
        return None
    return int(lease.holder.rsplit(":", 1)[1])


def race(world, processes: Processes, during=None) -> tuple[list[int], list[dict]]:
    """200 submissions at once through the web process; ``during(answers_so_far)`` runs after the 50th answer."""
    cluster = Cluster.objects.create(name="race", backend="local", settings={})
    pool = GpuPool.objects.create(cluster=cluster, gpu_type="A100", nodes=1, gpus_per_node=ROOM)
    Quota.objects.create(department=Department.objects.get(slug="vision"), pool=pool, nominal=ROOM, borrowing_limit=0)
    port = processes.web(SERVICE)
    tokens = [token_create(user=user, name="race")[1] for user in (world.alice, world.carol)]

    def submit(index: int) -> tuple[int, dict]:
        if index == 50 and during is not None:
            during()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            response = client.post(
                "/api/v1/jobs/",
                json={**BODY, "name": f"race-{index}"},
                headers={"Authorization": f"Token {tokens[index % 2]}"},
            )
        return response.status_code, response.json()

    threads = 32 if connection.vendor == "postgresql" else 8
    with ThreadPoolExecutor(max_workers=threads) as executor:
        answers = list(executor.map(submit, range(SUBMISSIONS)))
    return [status for status, _ in answers], [body for _, body in answers]


def assert_exactly_the_room_admitted_once(processes: Processes) -> None:
    jobs = Job.objects.filter(cluster__name="race")
    wait_for(
        lambda: (
            jobs.filter(status="admitted").count() >= ROOM
            and not jobs.filter(status="queued", pending_reason="").exists()
        ),  # every waiting job told why
        timeout=90,
        what="the service to admit what fits and tell the rest why",
        reconcile=False,
    )
    assert jobs.count() == SUBMISSIONS
    admitted = jobs.filter(status="admitted")
    assert admitted.count() == ROOM, processes.logs()[-3000:]
    assert sorted(gpu for job in admitted for slot in job.placement for gpu in slot["gpus"]) == list(range(ROOM))
    assert JobEvent.objects.filter(job__cluster__name="race", to_status="admitted").count() == ROOM  # none twice
    reasons = set(jobs.filter(status="queued").values_list("pending_reason", flat=True))
    assert reasons and "" not in reasons and reasons <= {"borrowing_limit", "lower_in_queue", "quota_exhausted"}


@pytest.mark.django_db(transaction=True)
def test_200_concurrent_submissions_through_the_scheduler_service(world, processes):
    scheduler(processes, "scheduler")
    statuses, bodies = race(world, processes)
    assert statuses == [201] * SUBMISSIONS
    assert {body["status"] for body in bodies} == {"queued"}  # the requests scheduled nothing themselves
    assert_exactly_the_room_admitted_once(processes)


@pytest.mark.django_db(transaction=True)
def test_a_standby_takes_over_when_the_leader_is_killed_during_200_submissions(world, processes):
    first, second = scheduler(processes, "scheduler-1"), scheduler(processes, "scheduler-2")
    by_pid = {first.pid: first, second.pid: second}
    leader = wait_for(leader_pid, timeout=60, what="a scheduler to lead", reconcile=False)
    killed = []

    def kill_the_leader():  # in a submitting thread: its own database connection, closed after
        try:
            pid = leader_pid() or leader
        finally:
            connection.close()
        os.kill(pid, signal.SIGKILL)
        by_pid[pid].wait(timeout=30)
        killed.append(pid)

    statuses, _ = race(world, processes, during=kill_the_leader)
    assert statuses == [201] * SUBMISSIONS and killed
    (standby,) = set(by_pid) - set(killed)
    wait_for(lambda: leader_pid() == standby, timeout=30, what="the standby to lead", reconcile=False)
    assert_exactly_the_room_admitted_once(processes)
