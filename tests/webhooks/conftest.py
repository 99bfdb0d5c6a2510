"""Webhook test world: a real HTTP receiver on 127.0.0.1 that checks signatures as a customer would (with the
standardwebhooks library's own verifier, and the deprecated X-Portal-Signature by hand as the README says) and
counts deliveries per webhook-id, and a stand-in for Celery's broker (the one thing that leaves the process)
whose queued tasks the tests run, then the outbox as beat would, with a clock that jumps to each retry.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import pytest
from celery.canvas import Signature
from django.utils import timezone
from standardwebhooks import Webhook as StandardWebhook
from standardwebhooks import WebhookVerificationError

from core.celery import app as celery_app
from webhooks import outbox, services
from webhooks import tasks as webhook_tasks  # registers the tasks with the app, as a worker's autodiscovery does
from webhooks.models import Delivery, Webhook

ALL_EVENTS = list(services.EVENTS)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    signature_ok: bool  # the standardwebhooks library verified it (webhook-id, -timestamp, -signature)
    refusal: str  # else the library's reason
    legacy_signature_ok: bool  # the deprecated X-Portal-Signature is right too

    @property
    def json(self) -> dict:
        return json.loads(self.body)


class Receiver:
    """Answers each POST with the next status of ``answers`` (200 once they run out) and records it.

    ``fail_first``: each webhook-id is answered 500 that many times before the answers above apply.
    ``hold``: when set, each request waits (up to a minute) for the test to set ``release`` before it is
    answered; ``held`` is set once a request is waiting.
    """

    def __init__(self):
        self.secret = ""  # as a Standard Webhooks library is given it
        self.legacy_secret = ""  # the text X-Portal-Signature is keyed with, when not the same
        self.answers: list[int] = []
        self.requests: list[Received] = []
        self.fail_first = 0
        self.per_id: Counter[str] = Counter()  # requests per webhook-id
        self.delivered: Counter[str] = Counter()  # of those, answered 2xx
        self.hold = False
        self.held, self.release = threading.Event(), threading.Event()
        lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {key.lower(): value for key, value in self.headers.items()}
                try:
                    StandardWebhook(receiver.secret).verify(body, headers)
                    ok, refusal = True, ""
                except (WebhookVerificationError, ValueError) as exc:  # ValueError: a secret it cannot decode
                    ok, refusal = False, f"{type(exc).__name__}: {exc}"
                legacy_ok = legacy_signature_ok(receiver.legacy_secret or receiver.secret, headers, body)
                message_id = headers.get("webhook-id", "")
                with lock:
                    receiver.requests.append(Received(self.path, headers, body, ok, refusal, legacy_ok))
                    receiver.per_id[message_id] += 1
                    if receiver.per_id[message_id] <= receiver.fail_first:
                        status = 500
                    else:
                        status = receiver.answers.pop(0) if receiver.answers else 200
                if receiver.hold:
                    receiver.held.set()
                    receiver.release.wait(timeout=60)
                if 200 <= status < 300:
                    with lock:
                        receiver.delivered[message_id] += 1
                answer = json.dumps({"seen": headers.get("webhook-id"), "status": status}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/portal-hook"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def legacy_signature_ok(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The deprecated check, written out as the README describes it to receivers."""
    timestamp, header = headers.get("x-portal-timestamp", ""), headers.get("x-portal-signature", "")
    expected = "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return timestamp.isdigit() and abs(time.time() - int(timestamp)) <= 300 and hmac.compare_digest(expected, header)


@dataclass
class Sent:
    task: str
    args: list
    countdown: float | None
    eta: datetime | None = None


@dataclass
class Broker:
    """Records what the portal asks Celery to run instead of queueing it."""

    sent: list[Sent] = field(default_factory=list)
    done: list[Sent] = field(default_factory=list)

    def webhook_tasks(self) -> list[Sent]:
        return [sent for sent in self.sent if sent.task.startswith("webhooks.")]

    def run_queued(self) -> None:
        """Run the queued webhook tasks (the first attempts of new deliveries)."""
        while self.webhook_tasks():
            sent = self.webhook_tasks()[0]
            self.sent.remove(sent)
            self.done.append(sent)
            run_task(sent)

    def run_all(self, limit: int = 50) -> list[datetime]:
        """Run the queued webhook tasks, then beat's task as the clock jumps to each next attempt until no
        delivery is pending; the times beat ran at."""
        self.run_queued()
        return beat_until_settled(limit=limit)


def beat_until_settled(*, limit: int = 50) -> list[datetime]:
    """Send what is due as beat's task does, the clock jumping to the next due time, until none is pending."""
    now, runs = timezone.now(), list[datetime]()
    for _ in range(limit):
        pending = Delivery.objects.filter(status=Delivery.Status.PENDING)
        if not pending.exists():
            return runs
        # A row is claimable once its next attempt is due and no lease holds it.
        claimable = [
            max(due, held or due) for due, held in pending.values_list("next_attempt_at", "claimed_until") if due
        ]
        now = max(now, min(claimable)) if claimable else now
        outbox.deliveries_send_due(now=now)
        runs.append(now)
    raise AssertionError(f"deliveries still pending after {limit} runs of beat's task")


def run_task(sent: Sent) -> None:
    """Run a task as a worker would."""
    assert webhook_tasks.deliver.name in celery_app.tasks
    celery_app.tasks[sent.task].run(*sent.args)


@pytest.fixture
def broker(monkeypatch):
    recorder = Broker()

    def send_task(name, args=None, kwargs=None, countdown=None, eta=None, **options):
        recorder.sent.append(Sent(name, list(args or []), countdown, eta))

    def apply_async(signature, args=None, kwargs=None, **options):
        options = {**signature.options, **options}
        recorder.sent.append(Sent(signature.task, list(signature.args), options.get("countdown"), options.get("eta")))

    monkeypatch.setattr(celery_app, "send_task", send_task)
    monkeypatch.setattr(Signature, "apply_async", apply_async)
    yield recorder
    # Retries wait in the outbox, never in a worker's memory: no webhook task is ever delayed.
    delayed = [sent for sent in recorder.sent + recorder.done if sent.countdown is not None or sent.eta is not None]
    assert not [sent for sent in delayed if sent.task.startswith("webhooks.")], delayed


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def hooks(world, settings):
    """The test world, with webhooks allowed to call 127.0.0.1 (where the receiver listens)."""
    settings.PORTAL_WEBHOOK_ALLOW_PRIVATE = True
    return world


def webhook_for(receiver: Receiver, world, *, department: str = "vision", events=None, name: str = "ci") -> Webhook:
    """A webhook made through the service, as a dept admin would; the receiver learns its secret."""
    from accounts.models import Department

    webhook = services.webhook_create(
        actor=world.admin,
        department=Department.objects.get(slug=department),
        name=name,
        url=receiver.url,
        events=ALL_EVENTS if events is None else events,
    )
    receiver.secret = webhook.secret
    return webhook
