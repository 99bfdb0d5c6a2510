"""The live path: a Celery worker process -> channel layer -> websocket of the web process."""

import asyncio
import json

import pytest
import websockets
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings

from config.asgi import application
from frontend import services
from frontend.tasks import notify_user
from tests.processes import Processes


@pytest.fixture
def processes(tmp_path):
    running = Processes(tmp_path)
    running.migrate_channel_layer()
    running.purge_broker()
    yield running
    running.stop()


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_it_closes_the_socket_of_anonymous_visitors():
    async def connect():
        communicator = WebsocketCommunicator(application, "/ws/notifications/", headers=[(b"origin", b"http://localhost")])
        connected, code = await communicator.connect()
        await communicator.disconnect()
        return connected, code

    assert async_to_sync(connect)() == (False, 4401)


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_it_pushes_a_notification_to_the_users_own_socket_only(world, client):
    client.force_login(world.alice)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()

    async def exchange():
        communicator = WebsocketCommunicator(
            application, "/ws/notifications/", headers=[(b"origin", b"http://localhost"), (b"cookie", cookie)]
        )
        connected, _ = await communicator.connect()
        assert connected
        hello = await communicator.receive_json_from(timeout=5)
        from asgiref.sync import sync_to_async

        await sync_to_async(services.notify_user)(user_id=world.bob.pk, payload={"text": "for bob"})
        await sync_to_async(services.notify_user)(user_id=world.alice.pk, payload={"text": "for alice"})
        message = await communicator.receive_json_from(timeout=10)
        await communicator.disconnect()
        return hello, message

    hello, message = async_to_sync(exchange)()
    assert hello == {"type": "hello", "username": "alice"}
    assert message == {"type": "notify", "payload": {"text": "for alice"}}


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_task_run_by_a_real_worker_reaches_the_browser_of_a_real_server(world, client, processes):
    client.force_login(world.alice)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    port = processes.web()
    processes.worker()

    async def exchange():
        async with websockets.connect(
            f"ws://127.0.0.1:{port}/ws/notifications/",
            additional_headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={session}", "Origin": f"http://127.0.0.1:{port}"},
        ) as socket:
            hello = json.loads(await asyncio.wait_for(socket.recv(), 30))
            notify_user.delay(world.alice.pk, {"text": "trained"})
            return hello, json.loads(await asyncio.wait_for(socket.recv(), 60))

    try:
        hello, message = asyncio.run(exchange())
    except Exception:
        print(processes.logs())
        raise
    assert hello == {"type": "hello", "username": "alice"}
    assert message == {"type": "notify", "payload": {"text": "trained"}}
