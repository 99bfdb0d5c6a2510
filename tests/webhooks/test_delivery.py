"""Delivering events: signed POSTs to a real receiver, retries with backoff through Celery, giving up,
one attempt at a time, the reconcile of lost tasks, redelivery, and the SSRF guard."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from config.errors import Conflict, InvalidInput
from quotas.models import AuditEvent, Department
from tests.webhooks.conftest import Sent, run_task, webhook_for
from webhooks import services, signing
from webhooks.models import Delivery


def emit(department: str = "vision", event: str = "job.failed", data: dict | None = None) -> list[Delivery]:
    return services.event_emit(department=Department.objects.get(slug=department), event=event,
                               data=data if data is not None else {"id": 7})


def test_a_delivery_is_a_signed_json_post_that_a_receiver_can_verify(hooks, receiver, broker,
                                                                     django_capture_on_commit_callbacks):
    webhook = webhook_for(receiver, hooks)
    with django_capture_on_commit_callbacks(execute=True):
        delivery, = emit(data={"id": 7, "name": "digits"})
    assert [(s.task, s.args) for s in broker.webhook_tasks()] == [("webhooks.tasks.deliver", [delivery.pk, 1])]
    broker.run_all()
    request, = receiver.requests
    assert request.signature_ok
    assert request.path == "/portal-hook"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-portal-event"] == "job.failed"
    assert request.headers["x-portal-delivery"] == str(delivery.event_id) == request.json["id"]
    assert request.json["event"] == "job.failed" and request.json["department"] == "vision"
    assert request.json["data"] == {"id": 7, "name": "digits"}
    assert abs(int(request.headers["x-portal-timestamp"]) - time.time()) < 60
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code) == ("delivered", 1, 200)
    assert str(delivery.event_id) in delivery.response_excerpt and delivery.delivered_at is not None
    assert webhook.deliveries.count() == 1


def test_the_signature_fails_with_another_secret_a_changed_body_or_an_old_timestamp():
    body, now = b'{"event":"ping"}', 1_767_225_600
    header = signing.signature(secret="s3", timestamp=now, body=body)
    assert signing.verify(secret="s3", timestamp=str(now), body=body, header=header, now=now + 10)
    assert not signing.verify(secret="other", timestamp=str(now), body=body, header=header, now=now)
    assert not signing.verify(secret="s3", timestamp=str(now), body=body + b" ", header=header, now=now)
    assert not signing.verify(secret="s3", timestamp=str(now), body=body, header=header, now=now + 301)
    assert not signing.verify(secret="s3", timestamp="soon", body=body, header=header, now=now)


def test_a_failing_receiver_gets_the_event_again_after_the_backoff_with_the_same_id(hooks, receiver, broker,
                                                                                   django_capture_on_commit_callbacks):
    webhook_for(receiver, hooks)
    receiver.answers = [500, 500, 200]
    with django_capture_on_commit_callbacks(execute=True):
        delivery, = emit()
    runs = broker.run_all()
    # What Celery was asked: attempt 1 at once, attempt 2 after 10 s, attempt 3 after 30 s.
    assert [(s.args, s.countdown) for s in runs] == [([delivery.pk, 1], None), ([delivery.pk, 2], 10), ([delivery.pk, 3], 30)]
    assert len(receiver.requests) == 3
    assert {r.headers["x-portal-delivery"] for r in receiver.requests} == {str(delivery.event_id)}
    assert all(r.signature_ok for r in receiver.requests)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code, delivery.error) == ("delivered", 3, 200, "")


def test_it_gives_up_after_eight_attempts_and_records_the_last_answer(hooks, receiver, broker,
                                                                      django_capture_on_commit_callbacks):
    webhook_for(receiver, hooks)
    receiver.answers = [503] * 20
    with django_capture_on_commit_callbacks(execute=True):
        delivery, = emit()
    runs = broker.run_all()
    assert [s.countdown for s in runs] == [None, 10, 30, 120, 600, 3600, 3 * 3600, 6 * 3600]
    assert len(receiver.requests) == services.MAX_ATTEMPTS == 8
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code) == ("failed", 8, 503)
    assert "HTTP 503" in delivery.error and delivery.next_attempt_at is None


def test_a_pending_delivery_shows_when_it_is_tried_next(hooks, receiver, broker):
    webhook_for(receiver, hooks)
    receiver.answers = [500]
    delivery, = emit()
    before = timezone.now()
    run_task(Sent("webhooks.tasks.deliver", [delivery.pk, 1], None))
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code) == ("pending", 1, 500)
    assert timedelta(seconds=9) < delivery.next_attempt_at - before < timedelta(seconds=12)
    assert '"status": 500' in delivery.response_excerpt


def test_an_attempt_is_made_once_however_many_tasks_ask_for_it(hooks, receiver, broker):
    webhook_for(receiver, hooks)
    delivery, = emit()
    for _ in range(3):  # a task redelivered by the broker, and the reconcile's resend
        run_task(Sent("webhooks.tasks.deliver", [delivery.pk, 1], None))
    assert len(receiver.requests) == 1
    assert services.delivery_attempt(delivery_id=delivery.pk, attempt=2) is None  # delivered: nothing more
    assert len(receiver.requests) == 1


def test_the_reconcile_resends_deliveries_whose_task_was_lost(hooks, receiver, broker):
    webhook_for(receiver, hooks)
    lost, = emit()
    fresh, = emit()
    now = timezone.now()
    Delivery.objects.filter(pk=lost.pk).update(next_attempt_at=now - timedelta(minutes=5))
    assert services.deliveries_reconcile(now=now) == 1
    assert [s.args for s in broker.webhook_tasks()] == [[lost.pk, 1]]
    broker.run_all()
    assert [r.json["id"] for r in receiver.requests] == [str(lost.event_id)]
    assert Delivery.objects.get(pk=fresh.pk).status == "pending"


def test_the_reconcile_drops_old_finished_log_entries(hooks, receiver, broker):
    webhook_for(receiver, hooks)
    old, recent = emit(), emit()
    Delivery.objects.update(status="delivered")
    Delivery.objects.filter(pk=old[0].pk).update(created_at=timezone.now() - timedelta(days=31))
    services.deliveries_reconcile()
    assert list(Delivery.objects.values_list("pk", flat=True)) == [recent[0].pk]


def test_a_rolled_back_transaction_emits_nothing(hooks, receiver, broker, django_capture_on_commit_callbacks):
    webhook_for(receiver, hooks)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            emit()
            raise RuntimeError("the change failed after emitting")
    assert Delivery.objects.count() == 0 and callbacks == [] and broker.webhook_tasks() == []


def test_only_active_webhooks_of_the_department_that_asked_for_the_event_get_it(hooks, receiver, broker):
    webhook_for(receiver, hooks, name="all")
    webhook_for(receiver, hooks, name="models", events=["model.version_registered"])
    webhook_for(receiver, hooks, name="nlp", department="nlp")
    off = webhook_for(receiver, hooks, name="off")
    services.webhook_update(actor=hooks.admin, webhook=off, values={"active": False})
    assert [d.webhook.name for d in emit(event="job.failed")] == ["all"]
    assert sorted(d.webhook.name for d in emit(event="model.version_registered")) == ["all", "models"]


def test_a_redelivery_is_a_new_delivery_of_the_same_event(hooks, receiver, broker, django_capture_on_commit_callbacks):
    webhook_for(receiver, hooks)
    receiver.answers = [500] * 8
    delivery, = emit()
    with pytest.raises(Conflict):
        services.delivery_redeliver(actor=hooks.carol, delivery=delivery)  # still being attempted
    broker.sent.append(Sent("webhooks.tasks.deliver", [delivery.pk, 1], None))
    broker.run_all()
    delivery.refresh_from_db()
    assert delivery.status == "failed"
    with django_capture_on_commit_callbacks(execute=True):
        again = services.delivery_redeliver(actor=hooks.carol, delivery=delivery)
    broker.run_all()
    again.refresh_from_db()
    assert again.pk != delivery.pk and again.event_id == delivery.event_id and again.status == "delivered"
    assert receiver.requests[-1].json == delivery.payload and receiver.requests[-1].signature_ok
    assert AuditEvent.objects.filter(action="webhook.redeliver", actor=hooks.carol).count() == 1


def test_a_rotated_secret_signs_the_next_attempt(hooks, receiver, broker, django_capture_on_commit_callbacks):
    webhook = webhook_for(receiver, hooks)
    old = webhook.secret
    webhook = services.webhook_rotate_secret(actor=hooks.carol, webhook=webhook)
    assert webhook.secret != old and webhook.secret.startswith("whsec_")
    receiver.secret = webhook.secret
    with django_capture_on_commit_callbacks(execute=True):
        services.webhook_ping(actor=hooks.carol, webhook=webhook)
    broker.run_all()
    request, = receiver.requests
    assert request.signature_ok and request.json["event"] == "ping" and request.headers["x-portal-event"] == "ping"


# --- SSRF guard ------------------------------------------------------------------------------------

@pytest.mark.parametrize("url, says", [
    ("http://127.0.0.1:8000/hook", "loopback"),
    ("http://localhost/hook", "loopback"),
    ("http://[::1]/hook", "loopback"),
    ("https://10.1.2.3/hook", "private"),
    ("http://192.168.0.10/hook", "private"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://[::ffff:169.254.169.254]/", "link-local"),
    ("http://0.0.0.0/", "private"),
    ("http://100.64.0.1/", "non-public"),  # carrier-grade NAT
])
def test_internal_addresses_are_refused_without_the_setting(world, settings, url, says):
    settings.PORTAL_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(InvalidInput) as refused:
        services.webhook_create(actor=world.carol, department=Department.objects.get(slug="vision"), name="x", url=url,
                                events=["job.failed"])
    message = " ".join(refused.value.errors["url"])  # one per address the name resolves to
    assert says in message and "public addresses" in message


def test_the_guard_runs_again_at_delivery_time(hooks, receiver, broker, settings):
    webhook_for(receiver, hooks)  # saved while private addresses were allowed
    settings.PORTAL_WEBHOOK_ALLOW_PRIVATE = False
    delivery, = emit()
    run_task(Sent("webhooks.tasks.deliver", [delivery.pk, 1], None))
    assert receiver.requests == []
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.response_code is None
    assert "Not sent: 127.0.0.1 resolves to 127.0.0.1 is a loopback address" in delivery.error
    assert [(s.args, s.countdown) for s in broker.webhook_tasks()] == [([delivery.pk, 2], 10)]


@pytest.mark.parametrize("url, says", [
    ("ftp://hooks.example.com/x", "http:// or https://"),
    ("https://user:pw@hooks.example.com/x", "user name or password"),
    ("https:///x", "no host"),
    ("hooks.example.com/x", "http:// or https://"),
    ("https://hooks.example.com:99999/x", "not a valid URL"),
])
def test_malformed_urls_are_refused_with_what_to_write(hooks, url, says):
    with pytest.raises(InvalidInput) as refused:
        services.webhook_create(actor=hooks.carol, department=Department.objects.get(slug="vision"), name="x", url=url,
                                events=["job.failed"])
    assert says in " ".join(refused.value.errors["url"])


def test_a_url_by_name_is_sent_to_an_address_it_resolves_to_with_the_name_as_host(hooks, receiver, broker):
    webhook = webhook_for(receiver, hooks)
    port = receiver.server.server_port
    services.webhook_update(actor=hooks.carol, webhook=webhook, values={"url": f"http://localhost:{port}/by-name"})
    delivery, = emit()
    run_task(Sent("webhooks.tasks.deliver", [delivery.pk, 1], None))
    request, = receiver.requests
    assert request.path == "/by-name" and request.headers["host"] == f"localhost:{port}" and request.signature_ok


def test_a_receiver_that_is_down_is_retried_with_the_reason_logged(hooks, receiver, broker):
    webhook = webhook_for(receiver, hooks)
    receiver.close()  # nothing listens on its port any more
    delivery, = emit()
    run_task(Sent("webhooks.tasks.deliver", [delivery.pk, 1], None))
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.response_code is None
    assert delivery.error.startswith("Could not connect to 127.0.0.1")
    assert [s.countdown for s in broker.webhook_tasks()] == [10]
    assert webhook.deliveries.count() == 1
