"""A model server's port taken by another process never gets the router's requests (issue 14, item 5).

The attack: a job kills a department's model server and binds its port; the router would send that
department's instances to it and hand its answers back as predictions. The servers here are real
`serving.backends.server` processes started by servers_reconcile; the impostor is a real HTTP
server in a subprocess that answers KServe's readiness and predictions with "pwned". Requests go through
the router in this process (Django's test client with alice's token).
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from serving import servers
from serving.backends.client import clients_close
from serving.models import ModelServer
from tests.jobs.test_board_ownership import impostors, kill  # noqa: F401 - fixture
from tests.models_registry.test_serving import INSTANCES, create, poll, portal, register  # noqa: F401 - fixture

# The router reads the database on fresh connections of its own (router._fresh), as in production.
pytestmark = pytest.mark.django_db(transaction=True)

PWNED = b'{"predictions":["pwned"],"name":"iris","ready":true}'
SOLO = {
    "name": "solo",
    "department": "vision",
    "model": "iris",
    "variants": [{"name": "a", "version": 1, "weight": 100}],
}


def predict(portal):
    """alice's prediction through the router; its connections to model servers end with the call's event loop."""

    async def go():
        try:
            return await AsyncClient().post(
                "/serve/solo/predict",
                json.dumps({"instances": INSTANCES}),
                content_type="application/json",
                headers={"Authorization": portal.token},
            )
        finally:
            clients_close()

    response = async_to_sync(go)()
    assert b"pwned" not in response.content, "the impostor's answer reached the caller"
    return response


@pytest.fixture(autouse=True)
def _token(portal):
    portal.token = portal.api(portal.alice)._credentials["HTTP_AUTHORIZATION"]


def port_of(server: ModelServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def test_the_router_never_forwards_to_an_impostor_that_killed_the_server_and_took_its_port(portal, impostors):
    register("iris", 1)
    create(portal, SOLO)
    assert predict(portal).json()["predictions"] == [1, 0]
    server = ModelServer.objects.get()
    kill(server.pid, server.handle)
    impostors(port_of(server), body=PWNED)

    refused = predict(portal)
    assert refused.status_code == 503, refused.content
    assert refused.json()["detail"] == f"Variant a: {servers.NOT_OURS}"
    assert refused["Retry-After"] == "1"
    failed = ModelServer.objects.get()
    assert (failed.status, failed.message) == ("failed", servers.NOT_OURS)

    # Started again on another port, as a crashed server is; the router then answers with the model again.
    poll(lambda: predict(portal).status_code == 200, what="the variant back", reconcile=True)
    assert predict(portal).json()["predictions"] == [1, 0]
    restarted = ModelServer.objects.get()
    assert restarted.pid != server.pid and port_of(restarted) != port_of(server)


def test_a_server_whose_port_is_taken_before_it_comes_up_is_never_made_ready_there(portal, impostors):
    register("iris", 1)
    create(portal, SOLO, ready=False)
    servers.servers_reconcile()
    starting = ModelServer.objects.get()
    assert starting.status == "starting" and starting.url
    # The server needs a second or more to load its libraries before it binds: the impostor gets there first.
    impostors(port_of(starting), body=PWNED)

    def ready_elsewhere():
        predict(portal)
        now = ModelServer.objects.get()
        assert not (now.status == "ready" and now.url == starting.url), "made ready on the impostor's port"
        return now.status == "ready"

    poll(ready_elsewhere, what="a server of our own", reconcile=True)
    answer = poll(lambda: (r := predict(portal)).status_code == 200 and r, what="the router to use it")
    assert answer.json()["predictions"] == [1, 0]
