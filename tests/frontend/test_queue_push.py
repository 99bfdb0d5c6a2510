"""Queue moves: a scheduling cycle that only re-numbers waiting jobs (or changes why they wait) tells
their departments' open pages at once, instead of leaving them to their next poll.

Runs on whatever channel layer the settings configure (channels-lite embedded,
or Redis when REDIS_URL is set).
"""

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from config.asgi import application
from jobs import services
from jobs.admission import scheduling_cycle
from jobs.models import Job
from tests.frontend.test_live_jobs import HOST, ORIGIN, receive_until, session_cookie, submit


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_cycle_that_moves_a_waiting_job_up_pushes_a_queue_message_to_its_department(world, client):
    big = submit(world.alice, name="big", gpus_per_worker=8)
    first = submit(world.alice, name="first")
    second = submit(world.carol, name="second")
    assert (big.status, first.status, second.status) == ("admitted", "queued", "queued")
    assert Job.objects.get(pk=second.pk).queue_position == 2
    cookie = session_cookie(client, world.carol)

    async def exchange():
        communicator = WebsocketCommunicator(application, "/ws/departments/vision/", headers=[HOST, ORIGIN, cookie])
        connected, _ = await communicator.connect(timeout=10)
        assert connected
        assert await communicator.receive_json_from(timeout=10) == {"type": "hello"}
        # Cancelling the first waiting job runs a cycle; "second" only moves up, it changes no state.
        await sync_to_async(services.job_cancel)(
            user=world.alice, job=await sync_to_async(Job.objects.get)(pk=first.pk)
        )
        messages = await receive_until(communicator, lambda m: m["type"] == "queue")
        await communicator.disconnect()
        return messages

    messages = async_to_sync(exchange)()
    assert [(m["type"], m["job"]["name"], m["job"]["status"]) for m in messages[:-1]] == [("job", "first", "cancelled")]
    queue = messages[-1]
    assert [(j["id"], j["name"], j["status"], j["queue_position"]) for j in queue["jobs"]] == [
        (second.pk, "second", "queued", 1)
    ]
    second.refresh_from_db()
    assert queue["jobs"][0]["pending_reason"] == second.pending_reason != ""
    assert queue["jobs"][0]["status_message"] == second.status_message


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_other_departments_hear_nothing_of_a_queue_that_is_not_theirs(world, client):
    submit(world.alice, name="big", gpus_per_worker=8)
    first = submit(world.alice, name="first")
    submit(world.carol, name="second")
    cookie = session_cookie(client, world.bob)

    async def exchange():
        communicator = WebsocketCommunicator(application, "/ws/departments/nlp/", headers=[HOST, ORIGIN, cookie])
        connected, _ = await communicator.connect(timeout=10)
        assert connected
        await communicator.receive_json_from(timeout=10)
        await sync_to_async(services.job_cancel)(
            user=world.alice, job=await sync_to_async(Job.objects.get)(pk=first.pk)
        )
        # A change of nlp's own afterwards arrives first: vision's queue move was never sent here.
        await sync_to_async(submit)(world.bob, department="nlp", name="ours")
        message = await communicator.receive_json_from(timeout=10)
        await communicator.disconnect()
        return message

    message = async_to_sync(exchange)()
    assert (message["type"], message["job"]["name"]) == ("job", "ours")


@pytest.mark.django_db
def test_a_cycle_that_moves_nothing_pushes_nothing(world, django_capture_on_commit_callbacks):
    submit(world.alice, name="big", gpus_per_worker=8)
    submit(world.alice, name="waiting")
    with django_capture_on_commit_callbacks() as callbacks:
        scheduling_cycle()
    assert callbacks == []  # same positions, reasons and estimates: nothing to tell
