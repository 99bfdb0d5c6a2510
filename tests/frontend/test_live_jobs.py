"""Live job updates: a transition, once committed, reaches the job's and its department's websockets.

Runs on whatever channel layer the settings configure (channels-lite embedded,
or Redis when REDIS_URL is set).
"""

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings

from config.asgi import application
from jobs import services
from jobs.api import parse_job_input
from jobs.models import Job

ORIGIN = (b"origin", b"http://localhost")
HOST = (b"host", b"localhost")  # the page that opens a socket is the portal's own (frontend/ws_origin.py)


def submit(user, **fields):
    values, type_errors = parse_job_input(
        {
            "name": "live",
            "department": "vision",
            "code_url": "https://git.example.com/t/r.git",
            "command": "python t.py",
        }
        | fields
    )
    return services.job_submit(user=user, data=values, type_errors=type_errors)[0]


def session_cookie(client, user) -> tuple[bytes, bytes]:
    client.force_login(user)
    return b"cookie", f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()


def connect_outcome(path: str, headers: list) -> tuple[bool, int | None]:
    async def connect():
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await communicator.connect(timeout=10)
        await communicator.disconnect()
        return connected, code

    return async_to_sync(connect)()


async def receive_until(communicator, predicate, *, timeout=10.0):
    """Messages up to and including the first that satisfies ``predicate`` (each wait bounded by ``timeout``)."""
    seen = []
    while True:
        message = await communicator.receive_json_from(timeout=timeout)
        seen.append(message)
        if predicate(message):
            return seen


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_status_transition_is_pushed_to_the_jobs_socket(world, client):
    job = submit(world.alice)
    assert job.status == "admitted"
    cookie = session_cookie(client, world.carol)  # a department colleague watches alice's job

    async def exchange():
        communicator = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/", headers=[HOST, ORIGIN, cookie])
        connected, _ = await communicator.connect(timeout=10)
        assert connected
        assert await communicator.receive_json_from(timeout=10) == {"type": "hello"}
        await sync_to_async(services.job_cancel)(user=world.alice, job=await sync_to_async(Job.objects.get)(pk=job.pk))
        messages = await receive_until(communicator, lambda m: m["job"]["status"] == "cancelled")
        await communicator.disconnect()
        return messages[-1]

    message = async_to_sync(exchange)()
    assert message["type"] == "job"
    assert message["job"] | {"status_message": ""} == {
        "id": job.pk,
        "name": "live",
        "status": "cancelled",
        "pending_reason": "",
        "status_message": "",
        "queue_position": None,
    }
    assert [(e["from_status"], e["to_status"], e["reason"], e["message"]) for e in message["events"]] == [
        ("admitted", "cancelled", "cancelled", "Cancelled by alice.")
    ]


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_new_job_and_its_admission_reach_the_departments_members(world, client):
    cookie = session_cookie(client, world.carol)

    async def exchange():
        communicator = WebsocketCommunicator(application, "/ws/departments/vision/", headers=[HOST, ORIGIN, cookie])
        connected, _ = await communicator.connect(timeout=10)
        assert connected
        assert await communicator.receive_json_from(timeout=10) == {"type": "hello"}
        await sync_to_async(submit)(world.bob, department="nlp", name="elsewhere")
        job = await sync_to_async(submit)(world.alice, name="ours")
        messages = await receive_until(communicator, lambda m: m["job"]["status"] == "admitted")
        await communicator.disconnect()
        return job, messages

    job, messages = async_to_sync(exchange)()
    assert {m["job"]["name"] for m in messages} == {"ours"}  # nothing of nlp's job
    assert [(m["job"]["id"], m["job"]["status"]) for m in messages] == [(job.pk, "queued"), (job.pk, "admitted")]
    assert messages[0]["events"][0]["reason"] == "submitted"


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_outsiders_and_anonymous_visitors_are_refused(world, client):
    job = submit(world.alice)
    outsider = session_cookie(client, world.bob)
    assert connect_outcome(f"/ws/jobs/{job.pk}/", [HOST, ORIGIN, outsider]) == (False, 4404)
    assert connect_outcome(f"/ws/jobs/{job.pk + 1000}/", [HOST, ORIGIN, outsider]) == (False, 4404)
    assert connect_outcome("/ws/departments/vision/", [HOST, ORIGIN, outsider]) == (False, 4404)
    assert connect_outcome(f"/ws/jobs/{job.pk}/", [HOST, ORIGIN]) == (False, 4401)
    assert connect_outcome("/ws/departments/vision/", [HOST, ORIGIN]) == (False, 4401)
    member = session_cookie(client, world.alice)
    assert connect_outcome(f"/ws/jobs/{job.pk}/", [HOST, ORIGIN, member]) == (True, None)


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_nothing_is_pushed_for_a_change_that_was_rolled_back(world, client):
    from django.db import transaction

    job = submit(world.alice)
    cookie = session_cookie(client, world.alice)

    def cancel_then_roll_back():
        with pytest.raises(RuntimeError), transaction.atomic():
            services.job_cancel(user=world.alice, job=Job.objects.get(pk=job.pk))
            raise RuntimeError("changed my mind")

    async def exchange():
        communicator = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/", headers=[HOST, ORIGIN, cookie])
        connected, _ = await communicator.connect(timeout=10)
        assert connected
        await communicator.receive_json_from(timeout=10)
        await sync_to_async(cancel_then_roll_back)()
        # A committed change afterwards arrives first: the rolled-back one was never sent.
        await sync_to_async(services.job_cancel)(user=world.carol, job=await sync_to_async(Job.objects.get)(pk=job.pk))
        message = await communicator.receive_json_from(timeout=10)
        await communicator.disconnect()
        return message

    message = async_to_sync(exchange)()
    assert message["events"][0]["message"] == "Cancelled by carol."
    assert Job.objects.get(pk=job.pk).status == "cancelled"


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_member_removed_from_the_department_stops_hearing(world, client, monkeypatch):
    from accounts.models import Membership
    from frontend.consumers import _LiveConsumer

    monkeypatch.setattr(_LiveConsumer, "RECHECK_SECONDS", 0.0)  # look again before every message
    job = submit(world.alice)
    cookie = session_cookie(client, world.carol)

    async def exchange():
        communicator = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/", headers=[HOST, ORIGIN, cookie])
        connected, _ = await communicator.connect(timeout=10)
        assert connected and await communicator.receive_json_from(timeout=10) == {"type": "hello"}
        await sync_to_async(Membership.objects.filter(user=world.carol, department__slug="vision").delete)()
        await sync_to_async(services.job_cancel)(user=world.alice, job=await sync_to_async(Job.objects.get)(pk=job.pk))
        closed = await communicator.receive_output(timeout=10)
        await communicator.wait()
        return closed

    assert async_to_sync(exchange)() == {"type": "websocket.close", "code": 4404}
