"""Helpers of the admin console's tests (tests/frontend/test_console*.py): a signed-in browser, a job submitted
through the API, a page's text, and the audit events written.
"""

from django.test import Client

from accounts.models import AuditEvent

JOB = {"name": "q", "code_url": "https://git.example.com/r.git", "command": "python train.py"}


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submit(world, user, department="vision", **fields) -> dict:
    response = world.api(user).post("/api/v1/jobs/", {**JOB, "department": department, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def text(response) -> str:
    return response.content.decode()


def audit_actions(**filters) -> list[tuple[str, str]]:
    return list(AuditEvent.objects.filter(**filters).order_by("id").values_list("action", "target"))
