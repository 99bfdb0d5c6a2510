"""Delivering events: POSTs signed by Standard Webhooks (and the deprecated X-Portal headers) to a real
receiver, retries with backoff from the outbox, giving up, one attempt at a time, a first attempt whose task was
lost, redelivery, secrets old and new, and the SSRF guard. (Restarts and concurrent claimers: test_outbox.py.)"""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
import re
import time
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from standardwebhooks import Webhook as StandardWebhook
from standardwebhooks import WebhookVerificationError

from accounts.models import AuditEvent, Department
from core.errors import Conflict, InvalidInput
from tests.webhooks.conftest import Sent, run_task, webhook_for
from webhooks import outbox, services, signing
from webhooks.models import Delivery, Webhook

# The test vector of the Standard Webhooks specification's libraries (secret, id, timestamp, body, signature).
VECTOR = (
    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "msg_p5jXN8AQM9LWM0D4loKWxJek",
    1614265330,
    b'{"test": 2432232314}',
    "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
)
# A secret as the portal made them before Standard Webhooks ("whsec_" + secrets.token_urlsafe(32)).
LEGACY_SECRET = "whsec_gAzwL_gkQRt43y6pBdqRyh2Cx-B0_caWDE6J20A7kik"


def emit(department: str = "vision", event: str = "job.failed", data: dict | None = None) -> list[Delivery]:
    return services.event_emit(
        department=Department.objects.get(slug=department), event=event, data=data if data is not None else {"id": 7}
    )


def test_a_delivery_is_a_signed_json_post_that_a_receiver_can_verify(
    hooks, receiver, broker, django_capture_on_commit_callbacks
):
    webhook = webhook_for(receiver, hooks)
    with django_capture_on_commit_callbacks(execute=True):
        (delivery,) = emit(data={"id": 7, "name": "digits"})
    assert [(s.task, s.args) for s in broker.webhook_tasks()] == [("webhooks.tasks.deliver", [delivery.pk])]
    broker.run_all()
    (request,) = receiver.requests
    assert request.signature_ok, request.refusal
    assert request.path == "/portal-hook"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-portal-event"] == "job.failed"
    assert request.headers["webhook-id"] == str(delivery.event_id) == request.json["id"]
    assert request.headers["webhook-signature"].startswith("v1,")
    assert request.json["event"] == "job.failed" and request.json["department"] == "vision"
    assert request.json["data"] == {"id": 7, "name": "digits"}
    assert abs(int(request.headers["webhook-timestamp"]) - time.time()) < 60
    # The deprecated headers, still sent for one release: the same id and time, and their own signature.
    assert request.headers["x-portal-delivery"] == request.headers["webhook-id"]
    assert request.headers["x-portal-timestamp"] == request.headers["webhook-timestamp"]
    assert request.headers["x-portal-signature"].startswith("sha256=") and request.legacy_signature_ok
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code) == ("delivered", 1, 200)
    assert str(delivery.event_id) in delivery.response_excerpt and delivery.delivered_at is not None
    assert webhook.deliveries.count() == 1


def test_the_signature_is_the_specifications_hmac_of_id_timestamp_and_body():
    secret, message_id, timestamp, body, expected = VECTOR
    headers = signing.delivery_headers(
        secret=secret, event="ping", message_id=message_id, timestamp=timestamp, body=body
    )
    assert headers["webhook-signature"] == expected
    # The same, written out from the specification without the library.
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{message_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    assert headers["webhook-signature"] == "v1," + base64.b64encode(digest).decode()
    assert (headers["webhook-id"], headers["webhook-timestamp"]) == (message_id, "1614265330")


def signed(
    secret: str, body: bytes, *, message_id: str = "3f1c9a52-6d1e-4a77-9b0e-2f64c1d0a8b5", sent: int | None = None
) -> dict[str, str]:
    return signing.delivery_headers(
        secret=secret,
        event="ping",
        message_id=message_id,
        timestamp=int(time.time()) if sent is None else sent,
        body=body,
    )


def test_a_standard_webhooks_receiver_refuses_a_changed_body_id_or_time_another_secret_or_a_stale_timestamp():
    secret, body = signing.new_secret(), b'{"event":"ping","id":"3f1c9a52"}'
    headers = signed(secret, body)
    assert StandardWebhook(secret).verify(body, headers) == {"event": "ping", "id": "3f1c9a52"}
    refused = {
        "changed body": (secret, body + b" ", headers),
        "another secret": (signing.new_secret(), body, headers),
        "changed id": (secret, body, {**headers, "webhook-id": "another-event"}),
        "changed time": (secret, body, {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) - 1)}),
        "ten minutes old": (secret, body, signed(secret, body, sent=int(time.time()) - 600)),
        "ten minutes ahead": (secret, body, signed(secret, body, sent=int(time.time()) + 600)),
        "no signature": (secret, body, {k: v for k, v in headers.items() if k != "webhook-signature"}),
    }
    for case, (key, payload, sent_headers) in refused.items():
        with pytest.raises(WebhookVerificationError):
            StandardWebhook(key).verify(payload, sent_headers)
            pytest.fail(f"verified despite a {case}")


def test_an_id_with_a_dot_is_refused_as_it_would_blur_the_signed_fields():
    with pytest.raises(ValueError):
        signed(signing.new_secret(), b"{}", message_id="evt.1")


def test_the_deprecated_signature_fails_with_another_secret_a_changed_body_or_an_old_timestamp():
    body, now = b'{"event":"ping"}', 1_767_225_600
    header = signing.legacy_signature(secret="s3", timestamp=now, body=body)
    assert header == "sha256=" + hmac.new(b"s3", f"{now}.".encode() + body, hashlib.sha256).hexdigest()
    assert signing.legacy_verify(secret="s3", timestamp=str(now), body=body, header=header, now=now + 10)
    assert not signing.legacy_verify(secret="other", timestamp=str(now), body=body, header=header, now=now)
    assert not signing.legacy_verify(secret="s3", timestamp=str(now), body=body + b" ", header=header, now=now)
    assert not signing.legacy_verify(secret="s3", timestamp=str(now), body=body, header=header, now=now + 301)
    assert not signing.legacy_verify(secret="s3", timestamp="soon", body=body, header=header, now=now)


def test_new_secrets_are_standard_webhooks_secrets_of_32_random_bytes(hooks, receiver):
    made = {webhook_for(receiver, hooks, name=f"ci-{n}").secret for n in range(3)}
    assert len(made) == 3
    for secret in made:
        assert re.fullmatch(r"whsec_[A-Za-z0-9+/]{43}=", secret), secret
        assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
        assert signing.standard_secret(secret) == secret


def test_a_secret_made_before_keeps_signing_both_ways_and_converts_as_documented(hooks, receiver, broker):
    webhook = webhook_for(receiver, hooks)
    Webhook.objects.filter(pk=webhook.pk).update(secret=LEGACY_SECRET)  # a webhook made before this release
    # What the README tells its receiver: replace - by + and _ by /, pad with = to a multiple of 4.
    converted = "whsec_" + LEGACY_SECRET.removeprefix("whsec_").replace("-", "+").replace("_", "/") + "="
    assert signing.standard_secret(LEGACY_SECRET) == converted
    receiver.secret, receiver.legacy_secret = converted, LEGACY_SECRET
    (delivery,) = emit()
    run_task(Sent("webhooks.tasks.deliver", [delivery.pk], None))
    (request,) = receiver.requests
    assert request.legacy_signature_ok  # the receiver that checks X-Portal-Signature notices nothing
    assert request.signature_ok, request.refusal
    # Why the conversion is needed: a Standard Webhooks library does not read the URL-safe alphabet.
    with pytest.raises((WebhookVerificationError, ValueError)):
        StandardWebhook(LEGACY_SECRET).verify(request.body, request.headers)


def waits(delivery: Delivery) -> list[float]:
    """Each attempt's start, as the outbox recorded it, minus the previous one's: the backoff actually used."""
    starts: list[datetime] = []
    for _ in range(20):
        delivery.refresh_from_db()
        if delivery.status != "pending":
            break
        assert delivery.next_attempt_at is not None
        due = delivery.next_attempt_at
        starts.append(due)
        # Not a moment early: beat's task a second before the due time sends nothing.
        assert outbox.deliveries_send_due(now=due - timedelta(seconds=1)) == 0
        assert outbox.deliveries_send_due(now=due) == 1
    return [(later - earlier).total_seconds() for earlier, later in zip(starts, starts[1:], strict=False)]


def test_a_failing_receiver_gets_the_event_again_after_the_backoff_with_the_same_id(hooks, receiver, broker):
    webhook_for(receiver, hooks)
    receiver.answers = [500, 500, 200]
    (delivery,) = emit()
    # After failed attempt 1: 10 s, after 2: 40 s, each +-20 % (PORTAL_WEBHOOK_RETRY_SECONDS, x4 each time).
    first, second = waits(delivery)
    assert 8 <= first <= 12 and 32 <= second <= 48
    assert len(receiver.requests) == 3
    assert {r.headers["webhook-id"] for r in receiver.requests} == {str(delivery.event_id)}
    assert {r.headers["x-portal-delivery"] for r in receiver.requests} == {str(delivery.event_id)}
    assert all(r.signature_ok and r.legacy_signature_ok for r in receiver.requests)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code, delivery.error) == ("delivered", 3, 200, "")
    assert delivery.claimed_until is None and delivery.next_attempt_at is None


def test_it_gives_up_after_eight_attempts_and_records_the_last_answer(hooks, receiver, broker):
    webhook_for(receiver, hooks)
    receiver.answers = [503] * 20
    (delivery,) = emit()
    waited = waits(delivery)
    nominal = [10, 40, 160, 640, 2560, 10240, 21600]  # x4 each time, at most PORTAL_WEBHOOK_RETRY_MAX_SECONDS
    assert len(waited) == len(nominal)
    assert all(0.8 * n <= w <= 1.2 * n for w, n in zip(waited, nominal, strict=True)), waited
    assert len(receiver.requests) == settings.PORTAL_WEBHOOK_MAX_ATTEMPTS == 8
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code) == ("failed", 8, 503)
    assert delivery.error == (
        "The receiver answered HTTP 503; any 2xx status counts as delivered. "
        "Gave up after 8 attempts; redeliver it once the receiver is fixed."
    )
    assert delivery.next_attempt_at is None and delivery.claimed_until is None
    assert outbox.deliveries_send_due(now=timezone.now() + timedelta(days=30)) == 0  # nothing more, ever


def test_the_attempts_and_the_backoff_come_from_the_settings(hooks, receiver, broker, settings):
    settings.PORTAL_WEBHOOK_MAX_ATTEMPTS = 3
    settings.PORTAL_WEBHOOK_RETRY_SECONDS = 2
    settings.PORTAL_WEBHOOK_RETRY_MAX_SECONDS = 5
    webhook_for(receiver, hooks)
    receiver.answers = [500] * 5
    (delivery,) = emit()
    first, second = waits(delivery)
    assert 1.6 <= first <= 2.4 and 4 <= second <= 6  # 2 s, then 8 s capped at 5 s
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, len(receiver.requests)) == ("failed", 3, 3)
    assert "Gave up after 3 attempts" in delivery.error


def test_the_jitter_spreads_retries_of_deliveries_that_failed_together():
    rng = random.Random(7)
    spread = [outbox.retry_wait(3, first=10, longest=21600, rng=rng) for _ in range(200)]
    assert 128 <= min(spread) < 136 and 184 < max(spread) <= 192  # 160 s +- 20 %
    assert len({round(wait) for wait in spread}) > 40
    assert outbox.retry_wait(30, first=10, longest=21600, rng=rng) <= 1.2 * 21600


def test_a_pending_delivery_shows_when_it_is_tried_next(hooks, receiver, broker):
    webhook_for(receiver, hooks)
    receiver.answers = [500]
    (delivery,) = emit()
    before = timezone.now()
    run_task(Sent("webhooks.tasks.deliver", [delivery.pk], None))
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code) == ("pending", 1, 500)
    assert timedelta(seconds=7) < delivery.next_attempt_at - before < timedelta(seconds=13)
    assert before <= delivery.last_attempt_at <= timezone.now() and delivery.claimed_until is None
    assert '"status": 500' in delivery.response_excerpt


def test_an_attempt_is_made_once_however_many_tasks_ask_for_it(hooks, receiver, broker):
    webhook_for(receiver, hooks)
    (delivery,) = emit()
    for _ in range(3):  # a task redelivered by the broker, and beat's task running beside it
        run_task(Sent("webhooks.tasks.deliver", [delivery.pk], None))
        outbox.deliveries_send_due()
    assert len(receiver.requests) == 1
    assert not outbox.delivery_send(delivery_id=delivery.pk, now=timezone.now() + timedelta(days=1))  # delivered
    assert len(receiver.requests) == 1


def test_a_delivery_whose_first_task_was_lost_is_sent_by_beat(hooks, receiver, broker):
    webhook_for(receiver, hooks)
    (lost,) = emit()  # outside a transaction that commits: its task is never queued, as if the broker lost it
    assert broker.webhook_tasks() == []
    assert outbox.deliveries_send_due() == 1
    assert [r.json["id"] for r in receiver.requests] == [str(lost.event_id)]
    assert Delivery.objects.get(pk=lost.pk).status == "delivered"


def test_old_finished_log_entries_are_pruned(hooks, receiver, broker):
    webhook_for(receiver, hooks)
    old, recent, waiting = emit(), emit(), emit()
    Delivery.objects.exclude(pk=waiting[0].pk).update(status="delivered")
    Delivery.objects.exclude(pk=recent[0].pk).update(created_at=timezone.now() - timedelta(days=31))
    assert outbox.deliveries_prune() == 1  # the old one; a pending delivery stays, however old
    assert not Delivery.objects.filter(pk=old[0].pk).exists()
    assert sorted(Delivery.objects.values_list("pk", flat=True)) == sorted([recent[0].pk, waiting[0].pk])


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
    (delivery,) = emit()
    with pytest.raises(Conflict):
        services.delivery_redeliver(actor=hooks.carol, delivery=delivery)  # still being attempted
    broker.sent.append(Sent("webhooks.tasks.deliver", [delivery.pk], None))
    broker.run_all()
    delivery.refresh_from_db()
    assert delivery.status == "failed"
    with django_capture_on_commit_callbacks(execute=True):
        again = services.delivery_redeliver(actor=hooks.carol, delivery=delivery)
    broker.run_all()
    again.refresh_from_db()
    assert again.pk != delivery.pk and again.event_id == delivery.event_id and again.status == "delivered"
    assert receiver.requests[-1].json == delivery.payload and receiver.requests[-1].signature_ok
    assert {r.headers["webhook-id"] for r in receiver.requests} == {str(delivery.event_id)}  # 8 attempts + 1
    assert AuditEvent.objects.filter(action="webhook.redeliver", actor=hooks.carol).count() == 1


def test_a_rotated_secret_signs_the_next_attempt(hooks, receiver, broker, django_capture_on_commit_callbacks):
    webhook = webhook_for(receiver, hooks)
    old = webhook.secret
    webhook = services.webhook_rotate_secret(actor=hooks.carol, webhook=webhook)
    assert webhook.secret != old and signing.standard_secret(webhook.secret) == webhook.secret
    receiver.secret = webhook.secret
    with django_capture_on_commit_callbacks(execute=True):
        services.webhook_ping(actor=hooks.carol, webhook=webhook)
    broker.run_all()
    (request,) = receiver.requests
    assert request.signature_ok and request.json["event"] == "ping" and request.headers["x-portal-event"] == "ping"
    assert request.legacy_signature_ok
    with pytest.raises(WebhookVerificationError):
        StandardWebhook(old).verify(request.body, request.headers)


# --- SSRF guard ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, says",
    [
        ("http://127.0.0.1:8000/hook", "loopback"),
        ("http://localhost/hook", "loopback"),
        ("http://[::1]/hook", "loopback"),
        ("https://10.1.2.3/hook", "private"),
        ("http://192.168.0.10/hook", "private"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[::ffff:169.254.169.254]/", "link-local"),
        ("http://0.0.0.0/", "private"),
        ("http://100.64.0.1/", "non-public"),  # carrier-grade NAT
    ],
)
def test_internal_addresses_are_refused_without_the_setting(world, settings, url, says):
    settings.PORTAL_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(InvalidInput) as refused:
        services.webhook_create(
            actor=world.carol,
            department=Department.objects.get(slug="vision"),
            name="x",
            url=url,
            events=["job.failed"],
        )
    message = " ".join(refused.value.errors["url"])  # one per address the name resolves to
    assert says in message and "public addresses" in message


def test_the_guard_runs_again_at_delivery_time(hooks, receiver, broker, settings):
    webhook_for(receiver, hooks)  # saved while private addresses were allowed
    settings.PORTAL_WEBHOOK_ALLOW_PRIVATE = False
    (delivery,) = emit()
    run_task(Sent("webhooks.tasks.deliver", [delivery.pk], None))
    assert receiver.requests == []
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.response_code is None
    assert "Not sent: 127.0.0.1 resolves to 127.0.0.1 is a loopback address" in delivery.error
    assert delivery.next_attempt_at > timezone.now() and broker.webhook_tasks() == []  # the retry waits in the outbox


@pytest.mark.parametrize(
    "url, says",
    [
        ("ftp://hooks.example.com/x", "http:// or https://"),
        ("https://user:pw@hooks.example.com/x", "user name or password"),
        ("https:///x", "no host"),
        ("hooks.example.com/x", "http:// or https://"),
        ("https://hooks.example.com:99999/x", "not a valid URL"),
    ],
)
def test_malformed_urls_are_refused_with_what_to_write(hooks, url, says):
    with pytest.raises(InvalidInput) as refused:
        services.webhook_create(
            actor=hooks.carol,
            department=Department.objects.get(slug="vision"),
            name="x",
            url=url,
            events=["job.failed"],
        )
    assert says in " ".join(refused.value.errors["url"])


def test_a_url_by_name_is_sent_to_an_address_it_resolves_to_with_the_name_as_host(hooks, receiver, broker):
    webhook = webhook_for(receiver, hooks)
    port = receiver.server.server_port
    services.webhook_update(actor=hooks.carol, webhook=webhook, values={"url": f"http://localhost:{port}/by-name"})
    (delivery,) = emit()
    run_task(Sent("webhooks.tasks.deliver", [delivery.pk], None))
    (request,) = receiver.requests
    assert request.path == "/by-name" and request.headers["host"] == f"localhost:{port}" and request.signature_ok


def test_a_receiver_that_is_down_is_retried_with_the_reason_logged(hooks, receiver, broker):
    webhook = webhook_for(receiver, hooks)
    receiver.close()  # nothing listens on its port any more
    (delivery,) = emit()
    run_task(Sent("webhooks.tasks.deliver", [delivery.pk], None))
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.response_code is None
    assert delivery.error.startswith("Could not connect to 127.0.0.1")
    assert delivery.next_attempt_at > timezone.now() and delivery.attempts == 1
    assert webhook.deliveries.count() == 1
