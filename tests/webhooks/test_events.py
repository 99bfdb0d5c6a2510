"""Each event fires exactly once, with the right payload, when the real service makes the change."""

from __future__ import annotations

import uuid

import pytest
from django.db import transaction

from accounts.models import Department
from jobs import services as job_services
from jobs.api import parse_job_input
from jobs.models import Job
from jobs.transitions import job_transition
from models_registry import services as registry
from models_registry.models import ModelVersion, RegisteredModel
from serving import services
from tests.webhooks.conftest import webhook_for
from webhooks.models import Delivery


@pytest.fixture
def sent(hooks, receiver, broker, django_capture_on_commit_callbacks):
    """Run ``change()`` in a transaction that commits, deliver what it emitted, and return the verified payloads."""
    webhook_for(receiver, hooks, name="all")

    def deliver(change):
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            change()
        broker.run_all()
        assert all(request.signature_ok for request in receiver.requests)
        events = [request.json for request in receiver.requests]
        receiver.requests.clear()
        for event in events:
            assert uuid.UUID(event["id"]) and event["department"] == "vision" and event["created_at"]
        return events

    return deliver


def submit(world, name: str = "digits") -> Job:
    values, type_errors = parse_job_input(
        {
            "name": name,
            "department": "vision",
            "code_url": "https://git.example.com/t/r.git",
            "command": "python train.py",
        }
    )
    job, _ = job_services.job_submit(user=world.alice, data=values, type_errors=type_errors)
    return job


def test_a_job_that_succeeds_sends_job_succeeded_once(hooks, sent):
    job = submit(hooks)
    assert sent(lambda: job_transition(job=job, to="running")) == []  # not an ending: nothing sent
    events = sent(
        lambda: job_transition(job=job, to="succeeded", reason="completed", message="exit code 0", exit_code=0)
    )
    (event,) = events
    assert event["event"] == "job.succeeded"
    data = event["data"]
    assert {key: data[key] for key in ("id", "name", "status", "reason", "message", "exit_code")} == {
        "id": job.pk,
        "name": "digits",
        "status": "succeeded",
        "reason": "completed",
        "message": "exit code 0",
        "exit_code": 0,
    }
    assert data["urls"] == {
        "api": f"/api/v1/jobs/{job.pk}/",
        "page": f"/jobs/{job.pk}/",
        "logs": f"/api/v1/jobs/{job.pk}/logs/",
    }
    assert data["finished_at"]


@pytest.mark.parametrize("to, event", [("failed", "job.failed"), ("cancelled", "job.cancelled")])
def test_a_job_that_fails_or_is_cancelled_says_so(hooks, sent, to, event):
    job = submit(hooks)
    events = sent(
        lambda: job_transition(
            job=job,
            to=to,
            reason="oom" if to == "failed" else "cancelled by alice",
            exit_code=137 if to == "failed" else None,
        )
    )
    assert [(e["event"], e["data"]["status"], e["data"]["exit_code"]) for e in events] == [
        (event, to, 137 if to == "failed" else None)
    ]


def test_a_registered_version_sends_its_lineage(hooks, sent, settings, tmp_path):
    settings.PORTAL_ARTIFACT_ROOT = tmp_path / "store"
    settings.PORTAL_ARTIFACT_IMPORT_DIRS = [tmp_path / "incoming"]
    (tmp_path / "incoming").mkdir()
    (tmp_path / "incoming" / "model.joblib").write_bytes(b"a model")
    model = registry.model_create(user=hooks.alice, name="digits", department="vision")
    uri = f"file://{tmp_path / 'incoming' / 'model.joblib'}"
    (event,) = sent(
        lambda: registry.version_register(user=hooks.alice, model=model, artifact_uri=uri, metrics={"accuracy": 0.9})
    )
    assert event["event"] == "model.version_registered"
    assert {key: event["data"][key] for key in ("model", "version", "lineage", "metrics")} == {
        "model": "digits",
        "version": 1,
        "lineage": {"source_uri": uri},
        "metrics": {"accuracy": 0.9},
    }
    assert event["data"]["urls"]["api"] == "/api/v1/models/digits/versions/1/"


def version(model: RegisteredModel, number: int) -> ModelVersion:
    return ModelVersion.objects.create(
        model=model, version=number, artifact_uri=f"store://{model.name}/{number}/m.joblib"
    )


def test_setting_moving_and_removing_an_alias_sends_each_move(hooks, sent):
    model = RegisteredModel.objects.create(name="iris", department=Department.objects.get(slug="vision"))
    one, two = version(model, 1), version(model, 2)
    moves = sent(lambda: registry.alias_set(user=hooks.alice, version=one, name="champion"))
    moves += sent(lambda: registry.alias_set(user=hooks.alice, version=one, name="champion"))  # already there
    moves += sent(lambda: registry.version_update(user=hooks.alice, version=two, aliases=["champion"]))
    moves += sent(lambda: registry.alias_remove(user=hooks.alice, model=model, name="champion"))
    assert [(m["event"], m["data"]["alias"], m["data"]["from_version"], m["data"]["to_version"]) for m in moves] == [
        ("model.alias_moved", "champion", None, 1),
        ("model.alias_moved", "champion", 1, 2),
        ("model.alias_moved", "champion", 2, None),
    ]
    assert {m["data"]["model"] for m in moves} == {"iris"}


def test_a_rollback_sends_the_revision_it_made_and_why(hooks, sent):
    model = RegisteredModel.objects.create(name="iris", department=Department.objects.get(slug="vision"))
    version(model, 1), version(model, 2)
    deployment = services.deployment_create(
        user=hooks.alice,
        name="iris-ab",
        department="vision",
        model="iris",
        strategy="ab",
        variants=[{"name": "a", "version": 1, "weight": 100}, {"name": "b", "version": 2, "weight": 0}],
    )
    assert sent(lambda: services.deployment_promote(user=hooks.alice, deployment=deployment, variant="b")) == []
    (event,) = sent(lambda: services.deployment_rollback(user=hooks.alice, deployment=deployment))
    assert event["event"] == "deployment.rolled_back"
    assert {key: event["data"][key] for key in ("name", "reason", "revision", "model", "automatic")} == {
        "name": "iris-ab",
        "reason": "rollback to revision 1",
        "revision": 3,
        "model": "iris",
        "automatic": False,
    }
    deployment.refresh_from_db()
    assert deployment.revision == 3 and deployment.status == "rolled_back"


def test_a_change_that_fails_after_emitting_sends_nothing(hooks, sent, broker):
    job = submit(hooks)

    def failing():
        job_transition(job=job, to="failed", reason="oom")
        raise RuntimeError("the caller's transaction fails later")

    with pytest.raises(RuntimeError):
        sent(failing)
    assert Delivery.objects.count() == 0 and broker.webhook_tasks() == []
    assert Job.objects.get(pk=job.pk).status != "failed"
