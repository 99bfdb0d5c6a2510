"""The outbox: retries wait in the database, not in a worker. Real Celery worker and beat processes killed
between attempts, a sending process killed mid-attempt, concurrent claimers, pending deliveries from before
the outbox, and a delivery that gave up as the API and the console show it. The receiver is a real HTTP server
that counts the requests it gets per webhook-id (the receiver's idempotency key)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from accounts.models import Department
from tests.processes import ROOT, Processes, process_env
from tests.webhooks.conftest import webhook_for
from webhooks import outbox, services
from webhooks.models import Delivery

CLAIMERS = 8
DELIVERIES = 30
SEND_DUE = "import django; django.setup(); from webhooks import outbox; outbox.deliveries_send_due()"


def emit(**data) -> Delivery:
    (delivery,) = services.event_emit(
        department=Department.objects.get(slug="vision"), event="job.failed", data=data or {"id": 7}
    )
    return delivery


def wait_until(predicate, *, what: str, timeout: float = 90.0, logs=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{logs()[-6000:]}")


@pytest.fixture
def processes(tmp_path):
    running = Processes(tmp_path)
    running.purge_broker()
    yield running
    running.stop()


@pytest.mark.django_db(transaction=True)
def test_retries_wait_in_the_database_across_worker_and_beat_restarts_and_arrive_once(
    hooks, receiver, processes, monkeypatch
):
    # For the worker and beat started here: retries 4 s (+-20 %) apart, beat's task every second.
    for name, value in {
        "PORTAL_WEBHOOK_ALLOW_PRIVATE": "true",
        "PORTAL_WEBHOOK_POLL_SECONDS": "1",
        "PORTAL_WEBHOOK_RETRY_SECONDS": "4",
        "PORTAL_WEBHOOK_RETRY_MAX_SECONDS": "4",
    }.items():
        monkeypatch.setenv(name, value)
    webhook_for(receiver, hooks)
    receiver.fail_first = 2  # the receiver is down for the first two attempts
    worker, beat = processes.worker(), processes.beat()
    delivery = emit()  # committed: its first attempt is queued at once
    event_id = str(delivery.event_id)

    def waiting_for_retry():
        row = Delivery.objects.get(pk=delivery.pk)
        return row if row.attempts == 1 and row.claimed_until is None and row.response_code == 500 else None

    wait_until(waiting_for_retry, what="the first attempt", logs=processes.logs)
    for process in (worker, beat):  # both die while the retry waits
        process.send_signal(signal.SIGKILL)
        process.wait()
    row = Delivery.objects.get(pk=delivery.pk)
    assert (row.status, row.attempts, row.response_code) == ("pending", 1, 500)
    assert row.next_attempt_at is not None  # the retry is in the outbox, nothing of it in a worker
    assert receiver.per_id == {event_id: 1}

    processes.worker(), processes.beat()  # a supervisor starts them again
    row = wait_until(
        lambda: Delivery.objects.filter(pk=delivery.pk, status="delivered").first(),
        what="the delivery after the restart",
        logs=processes.logs,
    )
    assert (row.attempts, row.response_code, row.error) == (3, 200, "")
    assert receiver.per_id == {event_id: 3} and receiver.delivered == {event_id: 1}
    assert all(request.signature_ok for request in receiver.requests)


@pytest.mark.django_db(transaction=True)
def test_an_attempt_cut_short_by_a_killed_worker_is_made_again_after_its_lease_with_the_same_id(
    hooks, receiver, broker
):
    webhook_for(receiver, hooks)
    delivery = emit()
    receiver.hold = True  # the receiver reads the request and keeps the answer back
    env = process_env() | {"DJANGO_SETTINGS_MODULE": "config.settings", "PORTAL_WEBHOOK_ALLOW_PRIVATE": "true"}
    sender = subprocess.Popen([sys.executable, "-c", SEND_DUE], cwd=ROOT, env=env)
    try:
        assert receiver.held.wait(timeout=60), "the sending process never reached the receiver"
    finally:
        sender.send_signal(signal.SIGKILL)
        sender.wait()
    receiver.hold = False
    receiver.release.set()
    # The attempt's lease still holds the delivery: nobody else sends it meanwhile (its worker might be slow).
    assert outbox.deliveries_send_due() == 0 and receiver.per_id == {str(delivery.event_id): 1}
    row = Delivery.objects.get(pk=delivery.pk)
    assert (row.status, row.attempts, row.response_code) == ("pending", 1, None)
    assert row.claimed_until == row.last_attempt_at + outbox.ATTEMPT_LEASE
    assert outbox.deliveries_send_due(now=row.claimed_until) == 1  # the lease has passed: the worker is gone
    row.refresh_from_db()
    assert (row.status, row.attempts, row.response_code) == ("delivered", 2, 200)
    # At least once: the receiver saw the event twice, under one webhook-id to dedupe by.
    assert receiver.per_id == {str(delivery.event_id): 2}
    assert all(request.signature_ok for request in receiver.requests)


def claim_all_at_once(now) -> list[int]:
    """CLAIMERS threads, each with its own database connection, run beat's task at the same moment."""
    barrier, made, errors = threading.Barrier(CLAIMERS), [], []

    def claimer():
        try:
            barrier.wait(timeout=30)
            made.append(outbox.deliveries_send_due(now=now))
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            errors.append(repr(exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer) for _ in range(CLAIMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and not any(thread.is_alive() for thread in threads), errors
    return made


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_send_one_attempt_twice(hooks, receiver, broker):
    webhook_for(receiver, hooks)
    receiver.fail_first = 1  # every event fails once, so each claimer also races for the retries
    ids = {str(emit(n=n).event_id) for n in range(DELIVERIES)}
    made = claim_all_at_once(timezone.now())
    assert sum(made) == DELIVERIES and receiver.per_id == dict.fromkeys(ids, 1)
    assert Delivery.objects.filter(status="pending", attempts=1, response_code=500).count() == DELIVERIES
    made = claim_all_at_once(timezone.now() + timedelta(minutes=1))  # every retry is due
    assert sum(made) == DELIVERIES
    assert receiver.per_id == dict.fromkeys(ids, 2) and receiver.delivered == dict.fromkeys(ids, 1)
    assert set(Delivery.objects.values_list("status", "attempts")) == {("delivered", 2)}


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="row locks are PostgreSQL's (SQLite locks the whole database): set DATABASE_URL=postgres://... to run this",
)
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_claimer_takes_the_next_row_instead_of_waiting_behind_another(hooks, receiver, broker):
    webhook_for(receiver, hooks)
    first, second = emit(n=1), emit(n=2)
    Delivery.objects.filter(pk=first.pk).update(next_attempt_at=timezone.now() - timedelta(minutes=1))
    locked, done = threading.Event(), threading.Event()

    def other_claimer():  # holds the most overdue row, as a claimer does inside its claim
        try:
            with transaction.atomic():
                list(Delivery.objects.select_for_update().filter(pk=first.pk))
                locked.set()
                done.wait(timeout=60)
        finally:
            connections.close_all()

    thread = threading.Thread(target=other_claimer)
    thread.start()
    try:
        assert locked.wait(timeout=30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '5s'")  # waiting behind the lock would fail here
        claimed = outbox.claim(now=timezone.now())
    finally:
        done.set()
        thread.join(timeout=60)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = DEFAULT")
    assert claimed == outbox.Claim(delivery_id=second.pk, attempt=1)


@pytest.mark.django_db(transaction=True)
def test_pending_deliveries_from_before_the_outbox_are_sent_by_it(hooks, receiver, broker):
    webhook = webhook_for(receiver, hooks)
    now = timezone.now()
    before, outbox_migration = [("webhooks", "0002_moved_models")], [("webhooks", "0003_outbox")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps.get_model("webhooks", "Delivery")

        def pending(event_id: str, **fields):
            payload = {"id": event_id, "event": "job.failed"}
            return old.objects.create(
                webhook_id=webhook.pk, event="job.failed", event_id=event_id, payload=payload, **fields
            )

        # A retry that was waiting in a worker's memory, due now, and an attempt that was running (its
        # next_attempt_at was then the attempt's lease of 60 s).
        waiting = pending("5e0a2f3c-0d6b-4c1e-9a51-3f6f7b2a9c01", attempts=2, next_attempt_at=now)
        running = pending(
            "5e0a2f3c-0d6b-4c1e-9a51-3f6f7b2a9c02", attempts=1, next_attempt_at=now + timedelta(seconds=60)
        )
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(outbox_migration)
    assert outbox.deliveries_send_due(now=now) == 1
    assert [r.headers["webhook-id"] for r in receiver.requests] == [str(waiting.event_id)]
    assert outbox.deliveries_send_due(now=now + timedelta(seconds=60)) == 1
    assert Delivery.objects.get(pk=waiting.pk).attempts == 3 and Delivery.objects.get(pk=running.pk).attempts == 2
    assert set(Delivery.objects.values_list("status", flat=True)) == {"delivered"}


def test_a_delivery_that_gave_up_is_shown_failed_in_the_api_and_the_console(hooks, receiver, broker, settings, client):
    settings.PORTAL_WEBHOOK_MAX_ATTEMPTS = 2
    webhook = webhook_for(receiver, hooks)
    receiver.fail_first = 5
    delivery = emit()
    broker.run_all()
    (shown,) = hooks.api(hooks.alice).get(f"/api/v1/webhooks/{webhook.pk}/deliveries/").json()["results"]
    assert (shown["id"], shown["status"], shown["attempts"], shown["response_code"]) == (delivery.pk, "failed", 2, 500)
    assert shown["error"].endswith("Gave up after 2 attempts; redeliver it once the receiver is fixed.")
    assert shown["next_attempt_at"] is None and shown["last_attempt_at"]
    client.force_login(hooks.carol)
    page = client.get(f"/console/departments/vision/webhooks/{webhook.pk}/deliveries/").content.decode()
    assert '<span class="status status-failed">Failed</span>' in page
    assert "Gave up after 2 attempts; redeliver it once the receiver is fixed." in page and "Redeliver" in page
