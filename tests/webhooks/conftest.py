"""Webhook test world: a real HTTP receiver on 127.0.0.1 that checks signatures as a customer would (with the
standardwebhooks library's own verifier, and the deprecated X-Portal-Signature by hand as the README says),
and a stand-in for Celery's broker (the one thing that leaves the process) whose queued tasks the tests run.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time
from dataclasses import dataclass, field

import pytest
from celery.canvas import Signature
from celery.exceptions import Retry
from standardwebhooks import Webhook as StandardWebhook
from standardwebhooks import WebhookVerificationError

from core.celery import app as celery_app
from webhooks import services
from webhooks import tasks as webhook_tasks  # registers the tasks with the app, as a worker's autodiscovery does
from webhooks.models import Webhook

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
    """Answers each POST with the next status of ``answers`` (200 once they run out) and records it."""

    def __init__(self):
        self.secret = ""  # as a Standard Webhooks library is given it
        self.legacy_secret = ""  # the text X-Portal-Signature is keyed with, when not the same
        self.answers: list[int] = []
        self.requests: list[Received] = []
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
                receiver.requests.append(Received(self.path, headers, body, ok, refusal, legacy_ok))
                status = receiver.answers.pop(0) if receiver.answers else 200
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
    retries: int = 0


@dataclass
class Broker:
    """Records what the portal asks Celery to run (send_task and a task's retry) instead of queueing it."""

    sent: list[Sent] = field(default_factory=list)
    done: list[Sent] = field(default_factory=list)

    def webhook_tasks(self) -> list[Sent]:
        return [sent for sent in self.sent if sent.task.startswith("webhooks.")]

    def run_all(self, limit: int = 50) -> list[Sent]:
        """Run the queued webhook tasks, and the retries they ask for, at once (their countdowns recorded)."""
        for _ in range(limit):
            queued = self.webhook_tasks()
            if not queued:
                return self.done
            sent = queued[0]
            self.sent.remove(sent)
            self.done.append(sent)
            run_task(sent)
        raise AssertionError(f"still retrying after {limit} runs")


def run_task(sent: Sent) -> None:
    """Run a task as a worker would, so that its self.retry goes to the broker rather than raising at once."""
    assert webhook_tasks.deliver.name in celery_app.tasks
    task = celery_app.tasks[sent.task]
    task.push_request(
        id=f"test-{sent.task}-{sent.retries}",
        args=sent.args,
        kwargs={},
        retries=sent.retries,
        called_directly=False,
        is_eager=False,
        delivery_info={},
    )
    try:
        task.run(*sent.args)
    except Retry:
        pass
    finally:
        task.pop_request()


@pytest.fixture
def broker(monkeypatch) -> Broker:
    recorder = Broker()

    def send_task(name, args=None, kwargs=None, countdown=None, **options):
        recorder.sent.append(Sent(name, list(args or []), countdown))

    def apply_async(signature, args=None, kwargs=None, **options):
        options = {**signature.options, **options}
        recorder.sent.append(
            Sent(signature.task, list(signature.args), options.get("countdown"), options.get("retries", 0))
        )

    monkeypatch.setattr(celery_app, "send_task", send_task)
    monkeypatch.setattr(Signature, "apply_async", apply_async)
    return recorder


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
