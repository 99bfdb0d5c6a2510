"""The connection pool on PostgreSQL (issue 16 item 1): a busy pool answers 503 and loses nothing, a Celery task
retries, the budget is checked against the server at start-up, and a forked child never shares its parent's
connections. Skipped on SQLite, which has no pool.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from celery.signals import task_retry
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection, connections
from django.test import Client

from accounts.tokens import token_create
from core.celery import app
from jobs.admission import CYCLE_LOCK_KEY
from jobs.models import Job
from tests.processes import Processes, process_env, wait_for
from tests.processes import test_database_url as database_url

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    os.environ.get("DATABASE_URL", "").split(":", 1)[0] not in {"postgres", "postgresql"},
    reason="the connection pool is PostgreSQL's: set DATABASE_URL=postgres://... to run these",
)

BODY = {
    "name": "blocked",
    "department": "vision",
    "code_url": "https://git.example.com/r.git",
    "command": "python train.py",
    "image": "python",
    "gpus_per_worker": 1,
}


def raw_connection() -> psycopg.Connection:
    """A connection of the test's own, outside Django and its pool."""
    return psycopg.connect(database_url().replace("postgres://", "postgresql://", 1), autocommit=True)


@pytest.fixture
def processes(tmp_path):
    running = Processes(tmp_path)
    yield running
    running.stop()


@pytest.mark.django_db(transaction=True)
def test_a_request_that_finds_the_pool_busy_waits_then_gets_503_and_the_waiting_submission_lands(world, processes):
    # A web process whose pool holds one connection, given up on after 1 s.
    port = processes.web(env={"PORTAL_DB_POOL_MAX": "1", "PORTAL_DB_POOL_MIN": "1", "PORTAL_DB_POOL_TIMEOUT": "1"})
    base = f"http://127.0.0.1:{port}"
    _, token = token_create(user=world.alice, name="pool")
    headers = {"Authorization": f"Token {token}"}
    browser = Client()
    browser.force_login(world.alice)
    cookies = {"sessionid": browser.cookies["sessionid"].value}
    answers: dict[str, httpx.Response] = {}

    with raw_connection() as lock, raw_connection() as probe:
        # The scheduling cycle's lock, held here: a submission takes the pool's one connection and waits on it.
        lock.execute("SELECT pg_advisory_lock(%s)", [CYCLE_LOCK_KEY])
        submit = threading.Thread(
            target=lambda: answers.update(
                submit=httpx.post(f"{base}/api/v1/jobs/", json=BODY, headers=headers, timeout=60)
            )
        )
        submit.start()
        wait_for(
            lambda: probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'advisory'"
            ).fetchone()[0],
            what="the submission to wait on the cycle lock",
            reconcile=False,
        )
        started = time.monotonic()
        listed = httpx.get(f"{base}/api/v1/jobs/", headers=headers, timeout=60)
        waited = time.monotonic() - started
        page = httpx.get(f"{base}/jobs/", cookies=cookies, headers={"Accept": "text/html"}, timeout=60)
        lock.execute("SELECT pg_advisory_unlock(%s)", [CYCLE_LOCK_KEY])
        submit.join(timeout=60)

    assert listed.status_code == 503, listed.text
    assert waited >= 0.9  # it waited for a connection before giving up
    assert listed.headers["Retry-After"] == "5"
    assert listed.json() == {
        "detail": "The portal is busy: every database connection stayed in use for 1 s, so your request was not "
        "carried out. Try again in 5 seconds; if this keeps happening, tell your platform admin."
    }
    assert page.status_code == 503 and page.headers["Retry-After"] == "5"
    assert page.headers["Content-Type"].startswith("text/html") and "<h1>The portal is busy</h1>" in page.text
    # The request that held the connection finished its work once the lock was free: nothing was lost.
    assert answers["submit"].status_code == 201, answers["submit"].text
    assert Job.objects.filter(pk=answers["submit"].json()["id"]).exists()
    assert httpx.get(f"{base}/api/v1/jobs/", headers=headers, timeout=60).status_code == 200  # Retry-After: try again


@contextmanager
def pool_of_one(timeout: float):
    """This process's pool replaced by one of a single connection that is waited for ``timeout`` seconds."""
    options = connection.settings_dict["OPTIONS"]
    saved = options["pool"]
    wrapper: Any = connection  # the PostgreSQL backend's, which has close_pool()
    wrapper.close()
    wrapper.close_pool()
    options["pool"] = {**saved, "min_size": 0, "max_size": 1, "timeout": timeout}
    try:
        yield
    finally:
        wrapper.close()
        wrapper.close_pool()
        options["pool"] = saved


@app.task(name="tests.test_db_pool_postgres.count_jobs")
def count_jobs() -> int:
    """A task like every other: the portal's PortalTask with its retry policy (core/celery.py)."""
    return Job.objects.count()


@pytest.mark.django_db(transaction=True)
def test_a_celery_task_that_finds_the_pool_busy_retries_and_does_its_work():
    held, release = threading.Event(), threading.Event()

    def hold():  # another thread of the process holds the pool's only connection until the task retries
        connections["default"].ensure_connection()
        held.set()
        release.wait(60)
        connections["default"].close()

    retries: list[str] = []

    def on_retry(sender=None, reason=None, **kwargs):
        retries.append(str(reason))
        release.set()

    task_retry.connect(on_retry, weak=False)
    try:
        with pool_of_one(timeout=2):
            holder = threading.Thread(target=hold)
            holder.start()
            assert held.wait(30)
            result = count_jobs.apply()
            holder.join(30)
    finally:
        task_retry.disconnect(on_retry)
        release.set()
    assert result.state == "SUCCESS" and result.result == 0, result.traceback
    assert retries and all("couldn't get a connection after 2.00 sec" in reason for reason in retries)


@pytest.mark.django_db(transaction=True)
def test_the_budget_check_reads_max_connections_from_the_server(settings):
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        max_connections = int(cursor.fetchone()[0])
    call_command("check", databases=["default"])  # the defaults fit the server
    settings.PORTAL_DB_PROCESSES = max_connections  # one connection each would already fill it
    with pytest.raises(SystemCheckError, match=rf"core.E001.*{max_connections} max_connections"):
        call_command("check", databases=["default"])
    call_command("check")  # without --database the check asks nothing of the server


@pytest.mark.django_db(transaction=True)
def test_migrate_refuses_to_start_an_overcommitted_portal(tmp_path):
    # `manage.py migrate` runs before web, worker, beat and watcher start (make run, the Kubernetes Job).
    env = process_env() | {"PORTAL_DB_PROCESSES": "500", "PORTAL_DATA_ROOT": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--plan"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "(core.E001) 500 processes (PORTAL_DB_PROCESSES) x 8 connections each" in result.stderr
    ok = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--plan"],
        cwd=ROOT,
        env=env | {"PORTAL_DB_PROCESSES": "6"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_forked_child_opens_its_own_connection_and_leaves_its_parents_alone():
    # The Celery worker's main process writes its heartbeat through its pool, then forks prefork children.
    with pool_of_one(timeout=10):  # one connection in the pool: the parent's session is that one
        parent = backend_pid()
        connection.close()  # back into the pool, idle, as between two heartbeats
        reading, writing = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            code = 1
            try:
                os.write(writing, str(backend_pid()).encode())
                connection.close()
                code = 0
            finally:
                os._exit(code)
        os.close(writing)
        with os.fdopen(reading) as pipe:
            child_backend = int(pipe.read() or 0)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert child_backend not in {0, parent}  # its own session, not the parent's socket
        assert backend_pid() == parent  # and the parent's session is still there and in order
