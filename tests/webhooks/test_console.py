"""The console's Webhooks pages as a dept admin uses them: add (the secret shown once), edit, ping, the
delivery log with its answers, redeliver, delete; and who may open them."""

from __future__ import annotations

import re

import pytest

from accounts.models import Department
from tests.webhooks.conftest import run_task, webhook_for
from webhooks.models import Delivery, Webhook

PAGE = "/console/departments/vision/webhooks/"


@pytest.fixture
def carol(client, hooks):
    client.force_login(hooks.carol)
    return client


def html(response, status: int = 200) -> str:
    assert response.status_code == status, response.content.decode()[:2000]
    return response.content.decode()


def test_the_console_links_the_webhooks_page_and_it_invites_to_add_one(carol):
    members = html(carol.get("/console/departments/vision/members/"))
    assert f'<a href="{PAGE}">Webhooks</a>' in members
    page = html(carol.get(PAGE))
    assert 'aria-current="page">Webhooks</a>' in page
    assert "No webhooks yet." in page and "Add a webhook" in page
    assert 'value="deployment.rolled_back"' in page and "A deployment was rolled back" in page


def test_adding_a_webhook_shows_its_secret_once(carol, receiver):
    page = html(
        carol.post(PAGE, {"name": "ci", "url": receiver.url, "events": ["job.failed", "job.succeeded"], "active": "on"})
    )
    webhook = Webhook.objects.get(name="ci")
    assert (
        webhook.events == ["job.succeeded", "job.failed"] and webhook.active and webhook.created_by.username == "carol"
    )
    assert "Copy the secret now: it is not shown again." in page and webhook.secret in page
    assert "Standard Webhooks" in page and "Webhook(secret).verify(body, headers)" in page
    assert "<code>webhook-signature</code>" in page and "<code>webhook-id</code>" in page
    assert "Deprecated, sent for one more release only: <code>X-Portal-Signature</code>" in page
    listing = html(carol.get(PAGE))
    assert webhook.secret not in listing and "<code>job.succeeded</code>, <code>job.failed</code>" in listing
    assert webhook.secret not in html(carol.get(f"{PAGE}{webhook.pk}/"))


def test_a_rejected_webhook_says_why_beside_the_fields(carol, settings):
    settings.PORTAL_WEBHOOK_ALLOW_PRIVATE = False
    page = html(carol.post(PAGE, {"name": "ci", "url": "http://169.254.169.254/latest/", "events": []}), 400)
    assert "169.254.169.254 is a link-local (cloud metadata) address; webhooks may only call public addresses." in page
    assert "Choose at least one event to send." in page
    assert Webhook.objects.count() == 0


def test_ping_then_the_log_shows_status_attempts_code_and_excerpt_and_redeliver(
    carol, hooks, receiver, broker, django_capture_on_commit_callbacks
):
    webhook = webhook_for(receiver, hooks)
    receiver.answers = [500]
    with django_capture_on_commit_callbacks(execute=True):
        response = carol.post(f"{PAGE}{webhook.pk}/ping/")
    assert response.status_code == 302 and response["Location"] == f"{PAGE}{webhook.pk}/deliveries/"
    broker.run_all()
    log = html(carol.get(response["Location"]))
    assert "Ping queued for ci" in log
    row = log[log.index('<tr id="delivery-') :]
    row = row[: row.index("</tr>")]
    assert "<code>ping</code>" in row and '<span class="status status-succeeded">Delivered</span>' in row
    assert '<td class="num">2</td>' in row and "<code>HTTP 200</code>" in row
    delivery = Delivery.objects.get(webhook=webhook)
    assert f"&quot;seen&quot;: &quot;{delivery.event_id}&quot;" in row  # the receiver's answer
    with django_capture_on_commit_callbacks(execute=True):
        carol.post(f"{PAGE}{webhook.pk}/deliveries/{delivery.pk}/redeliver/")
    broker.run_all()
    log = html(carol.get(f"{PAGE}{webhook.pk}/deliveries/"))
    assert len(re.findall(r'<tr id="delivery-\d+">', log)) == 2 and len(receiver.requests) == 3


def test_a_failing_delivery_shows_the_error_and_the_next_attempt(
    carol, hooks, receiver, broker, django_capture_on_commit_callbacks
):
    webhook = webhook_for(receiver, hooks)
    receiver.answers = [502]
    with django_capture_on_commit_callbacks(execute=True):
        carol.post(f"{PAGE}{webhook.pk}/ping/")
    run_task(broker.webhook_tasks()[0])  # the first attempt only; its retry stays queued
    log = html(carol.get(f"{PAGE}{webhook.pk}/deliveries/"))
    assert '<span class="status status-queued">Pending</span>' in log and "next attempt at" in log
    assert "The receiver answered HTTP 502" in log and "<code>HTTP 502</code>" in log
    assert "Redeliver" not in log  # still being attempted


def test_edit_rotate_and_delete(carol, hooks, receiver):
    webhook = webhook_for(receiver, hooks)
    old = webhook.secret
    edit = html(carol.get(f"{PAGE}{webhook.pk}/"))
    assert "A secret made before the portal signed that way is in URL-safe base64" in edit  # how to convert it
    response = carol.post(f"{PAGE}{webhook.pk}/", {"name": "ci-2", "url": receiver.url, "events": ["job.failed"]})
    assert response.status_code == 302
    webhook.refresh_from_db()
    assert (webhook.name, webhook.events, webhook.active) == ("ci-2", ["job.failed"], False)
    page = html(carol.post(f"{PAGE}{webhook.pk}/rotate-secret/"))
    webhook.refresh_from_db()
    assert webhook.secret != old and webhook.secret in page and "New secret for ci-2" in page
    assert "Delete webhook ci-2?" in html(carol.get(f"{PAGE}{webhook.pk}/delete/"))
    assert carol.post(f"{PAGE}{webhook.pk}/delete/").status_code == 302
    assert not Webhook.objects.exists()


def test_members_are_refused_and_outsiders_see_nothing(client, hooks, receiver):
    webhook = webhook_for(receiver, hooks)
    paths = [PAGE, f"{PAGE}{webhook.pk}/", f"{PAGE}{webhook.pk}/deliveries/", f"{PAGE}{webhook.pk}/delete/"]
    client.force_login(hooks.alice)
    assert [client.get(path).status_code for path in paths] == [403] * 4
    assert client.post(f"{PAGE}{webhook.pk}/ping/").status_code == 403
    client.force_login(hooks.bob)
    assert [client.get(path).status_code for path in paths] == [404] * 4
    client.force_login(hooks.admin)
    assert [client.get(path).status_code for path in paths] == [200] * 4
    nlp = f"/console/departments/nlp/webhooks/{webhook.pk}/"
    assert client.get(nlp).status_code == 404  # a webhook is only found under its own department
    assert Department.objects.get(slug="vision").webhooks.count() == 1
