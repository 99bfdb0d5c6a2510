"""What the OpenAPI document does not list: the websockets, the TensorBoard proxy, the serving router, /metrics.

Each runs outside Django's request cycle or in other threads (channels' database_sync_to_async, the router's
fresh-connection reads), so these tests commit their world (transaction=True) instead of sharing the
matrix's rolled-back one. One test per role.
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import AsyncClient, Client

from accounts.tokens import token_create
from config.asgi import application
from serving import router
from tensorboards import proxy
from tensorboards.models import TensorBoard
from tests.security.objects import build_objects

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

ROLES = ("anonymous", "outsider", "member", "dept_admin", "platform_admin")
ORIGIN = (b"origin", b"http://localhost")
HOST = (b"host", b"localhost")  # the page that opens a socket is the portal's own (frontend/ws_origin.py)


@pytest.fixture
def portal(world, settings, tmp_path):
    settings.PORTAL_DATA_ROOT = tmp_path / "portal"
    settings.PORTAL_ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.PORTAL_WEBHOOK_ALLOW_PRIVATE = True
    router.tables_forget()  # routing tables are cached per process, by deployment name
    return world, build_objects(world, tmp_path / "artifacts")


def user_of(world, role):
    return {
        "anonymous": None,
        "outsider": world.bob,
        "member": world.alice,
        "dept_admin": world.carol,
        "platform_admin": world.admin,
    }[role]


def ws_outcome(path: str, user) -> tuple[bool, int | None]:
    headers = [HOST, ORIGIN]
    if user is not None:
        client = Client()
        client.force_login(user)
        headers.append(
            (b"cookie", f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode())
        )

    async def connect():
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await communicator.connect(timeout=10)
        await communicator.disconnect()
        return connected, code

    return async_to_sync(connect)()


@pytest.mark.parametrize("role", ROLES)
def test_the_websockets_open_only_for_the_department(portal, role):
    world, objects = portal
    user = user_of(world, role)
    for path in (f"/ws/jobs/{objects.job.pk}/", "/ws/departments/vision/"):
        connected, code = ws_outcome(path, user)
        if role == "anonymous":
            assert (connected, code) == (False, 4401), path
        elif role == "outsider":
            assert (connected, code) == (False, 4404), path
        else:
            assert connected, f"{role} could not watch {path}: {code}"


def fetch(path: str, user, *, method: str = "get", accept: str = "*/*"):
    async def go():
        client = AsyncClient()
        if user is not None:
            await client.aforce_login(user)
        try:
            response = await getattr(client, method)(path, headers={"accept": accept})
            body = b"".join([c async for c in response.streaming_content]) if response.streaming else response.content
        finally:
            await proxy.clients_close()
        return response, body

    return async_to_sync(go)()


@pytest.mark.parametrize("role", ["anonymous", "outsider"])
def test_the_tensorboard_proxy_hides_vision_boards_before_anything_starts(portal, role):
    world, objects = portal
    user = user_of(world, role)
    for path in (
        f"/tensorboard/{objects.job.pk}/",
        f"/tensorboard/{objects.job.pk}/data/runs",
        f"/tensorboard/compare/{objects.board.pk}/",
        f"/tensorboard/compare/{objects.board.pk}/data/runs",
    ):
        for method in ("get", "post"):
            response, body = fetch(path, user, method=method)
            want = 401 if role == "anonymous" else 404
            assert response.status_code == want, f"{method} {path}: {response.status_code} {body[:200]!r}"
        page, _ = fetch(path, user, accept="text/html")
        assert page.status_code == (302 if role == "anonymous" else 404), path
    assert not TensorBoard.objects.exclude(status="stopped").exists(), "nobody allowed asked, so nothing started"


def serve(path: str, user, body: dict):
    client = Client()
    headers = {}
    if user is not None:
        _, key = token_create(user=user, name="security")
        headers["HTTP_AUTHORIZATION"] = f"Token {key}"
    return client.post(path, json.dumps(body), content_type="application/json", **headers)


@pytest.mark.parametrize("role", ROLES)
def test_the_serving_router_answers_only_the_department(portal, role):
    world, objects = portal
    user = user_of(world, role)
    name = objects.deployment_name
    predicted = serve(f"/serve/{name}/predict", user, {"instances": [[1.0, 2.0]]})
    feedback = serve(f"/serve/{name}/feedback", user, {"request_id": "0" * 32, "success": True})
    if role == "anonymous":
        assert (predicted.status_code, feedback.status_code) == (401, 401)
    elif role == "outsider":
        # Another department's token: the deployment does not exist for it.
        assert (predicted.status_code, feedback.status_code) == (404, 404)
        assert name not in predicted.content.decode()
    else:
        # No model server runs here, so no prediction comes back; the point is that the router let them in.
        assert predicted.status_code not in (401, 403, 404), predicted.content
        assert predicted.status_code in (502, 503, 504), predicted.content


def test_metrics_take_no_portal_token_from_outside_the_allowed_networks(portal, settings):
    world, _ = portal
    settings.PORTAL_METRICS_ALLOW = []
    settings.PORTAL_METRICS_TOKEN = "metrics-secret"
    _, key = token_create(user=world.admin, name="security")
    assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Token {key}").status_code == 403
    assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer metrics-secret").status_code == 200
