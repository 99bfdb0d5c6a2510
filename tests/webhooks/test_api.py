"""The webhooks REST API: tenancy on every endpoint, the secret shown only when made, validation messages."""

from __future__ import annotations

import re

import pytest

from accounts.models import AuditEvent, Department
from webhooks import services
from webhooks.models import Delivery, Webhook

# vision: alice member, carol dept_admin; bob is in nlp only; admin is a platform admin.
USERS = ["anonymous", "bob", "alice", "carol", "admin"]
HOOK = {"name": "ci", "department": "vision", "url": "https://hooks.example.com/portal", "events": ["job.failed"]}


@pytest.fixture
def api(world, settings):
    settings.PORTAL_WEBHOOK_ALLOW_PRIVATE = False
    return world


def client(world, who: str):
    return world.api(None if who == "anonymous" else getattr(world, who))


def a_webhook(world, name: str) -> Webhook:
    return services.webhook_create(
        actor=world.carol,
        department=Department.objects.get(slug="vision"),
        name=name,
        url="https://hooks.example.com/portal",
        events=["job.failed", "job.succeeded"],
    )


def a_finished_delivery(webhook: Webhook) -> Delivery:
    return Delivery.objects.create(
        webhook=webhook,
        event="job.failed",
        event_id="0b7c3c9e-6c5e-4b43-9a43-1f1f0e6f9a10",
        payload={"id": "0b7c3c9e-6c5e-4b43-9a43-1f1f0e6f9a10", "event": "job.failed"},
        status="failed",
        attempts=8,
        response_code=500,
    )


# (method, path, body, expected status for anonymous, bob, alice, carol, admin)
ENDPOINTS = [
    ("get", "/api/v1/webhooks/{id}/", None, [401, 404, 200, 200, 200]),
    ("patch", "/api/v1/webhooks/{id}/", {"active": False}, [401, 404, 403, 200, 200]),
    ("delete", "/api/v1/webhooks/{id}/", None, [401, 404, 403, 204, 204]),
    ("post", "/api/v1/webhooks/{id}/rotate-secret/", None, [401, 404, 403, 200, 200]),
    ("post", "/api/v1/webhooks/{id}/ping/", None, [401, 404, 403, 202, 202]),
    ("get", "/api/v1/webhooks/{id}/deliveries/", None, [401, 404, 200, 200, 200]),
    ("post", "/api/v1/webhooks/{id}/deliveries/{delivery}/redeliver/", None, [401, 404, 403, 202, 202]),
]


@pytest.mark.parametrize("method, path, body, expected", ENDPOINTS, ids=[f"{m} {p}" for m, p, _, _ in ENDPOINTS])
def test_every_endpoint_lets_members_read_admins_change_and_hides_it_from_outsiders(api, method, path, body, expected):
    answers = []
    for who in USERS:
        webhook = a_webhook(api, f"hook-{who}")
        delivery = a_finished_delivery(webhook)
        response = getattr(client(api, who), method)(
            path.format(id=webhook.pk, delivery=delivery.pk), body, format="json"
        )
        answers.append(response.status_code)
        if response.status_code == 200 and "secret" in response.json():
            assert path.endswith("rotate-secret/") and response.json()["secret"] != webhook.secret
        elif response.status_code < 300 and method != "delete":
            assert "secret" not in response.json() and webhook.secret not in response.content.decode()
    assert answers == expected


def test_the_list_shows_a_departments_webhooks_to_its_members_only(api):
    a_webhook(api, "ci")
    answers = {who: client(api, who).get("/api/v1/webhooks/") for who in USERS}
    assert answers["anonymous"].status_code == 401
    names = {who: [w["name"] for w in answers[who].json()["results"]] for who in USERS[1:]}
    assert names == {"bob": [], "alice": ["ci"], "carol": ["ci"], "admin": ["ci"]}
    shown = answers["alice"].json()["results"][0]
    assert "secret" not in shown and shown["deliveries_url"].endswith("/deliveries/")


def test_creating_is_for_the_departments_admins_and_shows_the_secret_once(api):
    answers = {
        who: client(api, who).post("/api/v1/webhooks/", {**HOOK, "name": f"ci-{who}"}, format="json") for who in USERS
    }
    assert {who: r.status_code for who, r in answers.items()} == {
        "anonymous": 401,
        "bob": 400,
        "alice": 403,
        "carol": 201,
        "admin": 201,
    }
    assert answers["bob"].json() == {"department": ["You are not a member of a department called 'vision'."]}
    created = answers["carol"].json()
    assert created["events"] == ["job.failed"] and created["active"] is True
    # The Standard Webhooks form: "whsec_" + base64 of the 32 key bytes, for any Standard Webhooks library.
    assert re.fullmatch(r"whsec_[A-Za-z0-9+/]{43}=", created["secret"]), created["secret"]
    assert created["created_by"] == "carol" and created["department"] == "vision"
    again = client(api, "carol").get(f"/api/v1/webhooks/{created['id']}/").json()
    assert "secret" not in again
    assert AuditEvent.objects.filter(action="webhook.create", actor=api.carol).count() == 1


def test_every_problem_is_named_with_what_to_do(api):
    response = client(api, "carol").post(
        "/api/v1/webhooks/",
        {
            "name": "",
            "department": "vision",
            "url": "ftp://user:pw@files.example.com/x",
            "events": ["job.done", "ping"],
            "active": "maybe",
            "secret": "mine",
        },
        format="json",
    )
    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == {"name", "url", "events", "active", "secret"}
    assert errors["url"] == [
        "Use an http:// or https:// URL.",
        "Do not put a user name or password in the URL; the signature authenticates deliveries.",
    ]
    assert errors["events"][0].startswith("Unknown event 'job.done'; choose from: job.succeeded, job.failed")
    assert errors["secret"] == ["Unknown field."]
    assert client(api, "carol").post("/api/v1/webhooks/", {**HOOK, "events": []}, format="json").json() == {
        "events": ["Choose at least one event to send."]
    }
    assert Webhook.objects.count() == 0


def test_a_name_is_unique_in_its_department_and_the_department_cannot_change(api):
    webhook = a_webhook(api, "ci")
    carol = client(api, "carol")
    duplicate = carol.post("/api/v1/webhooks/", HOOK, format="json")
    assert duplicate.status_code == 400
    assert duplicate.json() == {"name": ["vision already has a webhook called ci; choose another name."]}
    moved = carol.patch(f"/api/v1/webhooks/{webhook.pk}/", {"department": "nlp"}, format="json")
    assert moved.status_code == 400 and "stays in its department" in moved.json()["department"][0]


def test_a_patch_changes_only_what_it_names_and_is_audited(api):
    webhook = a_webhook(api, "ci")
    response = client(api, "carol").patch(
        f"/api/v1/webhooks/{webhook.pk}/",
        {"events": ["model.alias_moved", "job.failed"], "url": "https://other.example.com/x"},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["events"] == ["job.failed", "model.alias_moved"]  # in the catalogue's order
    assert response.json()["name"] == "ci" and response.json()["url"] == "https://other.example.com/x"
    audit = AuditEvent.objects.get(action="webhook.update")
    assert audit.data["before"]["url"] == "https://hooks.example.com/portal"
    assert audit.data["after"]["url"] == "https://other.example.com/x"


def test_the_delivery_log_is_newest_first_and_a_pending_one_cannot_be_redelivered(api):
    webhook = a_webhook(api, "ci")
    old = a_finished_delivery(webhook)
    new = Delivery.objects.create(
        webhook=webhook, event="ping", event_id="1b7c3c9e-6c5e-4b43-9a43-1f1f0e6f9a10", payload={"event": "ping"}
    )
    alice = client(api, "alice")
    log = alice.get(f"/api/v1/webhooks/{webhook.pk}/deliveries/").json()
    assert [d["id"] for d in log["results"]] == [new.pk, old.pk] and log["count"] == 2
    assert log["results"][1]["status"] == "failed" and log["results"][1]["response_code"] == 500
    conflict = client(api, "carol").post(f"/api/v1/webhooks/{webhook.pk}/deliveries/{new.pk}/redeliver/")
    assert conflict.status_code == 409 and "still being attempted" in conflict.json()["detail"]
    other = a_webhook(api, "other")
    assert client(api, "carol").post(f"/api/v1/webhooks/{other.pk}/deliveries/{old.pk}/redeliver/").status_code == 404
