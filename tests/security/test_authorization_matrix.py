"""The authorization matrix: every operation of the OpenAPI document x {anonymous, outsider, member, dept admin,
platform admin}, each its own test, with the expected answer derived from the rules in schema_ops.expected.

A leak is a 2xx for a role that must not get one, or vision's data in an outsider's answer (or nlp's in
vision's people's answers). An operation that takes a body needs a minimal valid example in BODIES; a path
parameter needs a fixture in objects.PATH_FIXTURES: without one, the operation's tests fail and say so.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.tokens import token_create
from tensorboards import services as boards
from tensorboards.models import TensorBoard
from tests.conftest import PASSWORD
from tests.security.objects import MissingFixture, Objects, fill_path, marker_found, world_with_objects
from tests.security.schema_ops import ROLES, expected, openapi, operations

pytestmark = pytest.mark.django_db

# Minimal valid bodies, as a member of vision would send them: (METHOD, path) -> body(objects).
BODIES = {
    ("POST", "/api/v1/auth/token/"): lambda o: {"username": "alice", "password": PASSWORD},
    ("POST", "/api/v1/jobs/"): lambda o: {
        "name": "sec-new-job",
        "department": "vision",
        "code_url": "https://git.example.com/t/r.git",
        "command": "python train.py",
        "gpus_per_worker": 0,
    },
    ("POST", "/api/v1/jobs/preview/"): lambda o: {
        "name": "sec-preview",
        "department": "vision",
        "code_url": "https://git.example.com/t/r.git",
        "command": "python train.py",
        "gpus_per_worker": 0,
    },
    ("POST", "/api/v1/jobs/{job_id}/clone/"): lambda o: {"name": "sec-clone"},
    ("POST", "/api/v1/tensorboards/"): lambda o: {"jobs": [o.job.pk, o.second_job.pk]},
    ("POST", "/api/v1/models/"): lambda o: {"name": "sec-new-model", "department": "vision"},
    ("POST", "/api/v1/models/{name}/versions/"): lambda o: {"artifact_uri": f"store://{o.model.name}/1/model.joblib"},
    ("PATCH", "/api/v1/models/{name}/versions/{number}/"): lambda o: {"tags": {"checked": "yes"}, "aliases": ["best"]},
    ("POST", "/api/v1/deployments/"): lambda o: {
        "name": "sec-new-deploy",
        "department": "vision",
        "model": o.model.name,
        "variants": [{"name": "a", "version": 1, "weight": 100}],
    },
    ("PATCH", "/api/v1/deployments/{name}/"): lambda o: {"sticky": False},
    ("POST", "/api/v1/deployments/{name}/promote/"): lambda o: {"variant": "a"},
    ("POST", "/api/v1/image-builds/"): lambda o: {
        "name": "sec-new-image",
        "department": "vision",
        "dockerfile": "FROM python:3.11\n",
    },
    ("PUT", "/api/v1/departments/{slug}/quotas/"): lambda o: [{"cluster": "local", "gpu_type": "sim", "nominal": 4}],
    ("POST", "/api/v1/departments/{slug}/quotas/preview/"): lambda o: [
        {"cluster": "local", "gpu_type": "sim", "nominal": 4}
    ],
    ("POST", "/api/v1/tokens/"): lambda o: {"name": "sec-new-token"},
    ("POST", "/api/v1/storage/"): lambda o: {
        "department": "vision",
        "name": "sec-new-volume",
        "kind": "pvc",
        "pvc_name": "sec-claim",
    },
    ("PATCH", "/api/v1/storage/{storage_id}/"): lambda o: {"description": "checked"},
    ("POST", "/api/v1/webhooks/"): lambda o: {
        "name": "sec-new-hook",
        "department": "vision",
        "url": "https://hooks.example.com/new",
        "events": ["job.failed"],
    },
    ("PATCH", "/api/v1/webhooks/{webhook_id}/"): lambda o: {"active": False},
    ("POST", "/api/v1/quota-loans/"): lambda o: {
        "from_department": "vision",
        "to_department": "sec-lab",
        "cluster": "local",
        "gpu_type": "sim",
        "gpus": 1,
        "until": (timezone.now() + timedelta(days=1)).isoformat(),
    },
}

CASES = [pytest.param(op, role, id=f"{op} as {role}") for op in operations() for role in ROLES]


@pytest.fixture(scope="module")
def shared(django_db_setup, django_db_blocker, tmp_path_factory):
    with world_with_objects(django_db_blocker, tmp_path_factory.mktemp("security")) as (world, objects):
        yield world, objects


@pytest.fixture
def portal(shared, db):
    cache.clear()  # the throttles' counters: every test starts with a full allowance
    yield shared
    # POST .../tensorboard/ starts a real TensorBoard process for the roles allowed to; stop it.
    for board in TensorBoard.objects.exclude(pid=None):
        boards.board_stop(board=board)


def client_for(world, role: str) -> APIClient:
    user = {
        "anonymous": None,
        "outsider": world.bob,
        "member": world.alice,
        "dept_admin": world.carol,
        "platform_admin": world.admin,
    }[role]
    client = APIClient()
    if user is not None:
        _, key = token_create(user=user, name="security")
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def has_body(operation) -> bool:
    return "requestBody" in openapi()["paths"][operation.path][operation.method.lower()]


def call(client, operation, objects: Objects, *, query: str = ""):
    url = fill_path(operation.path, objects) + query
    body = None
    if has_body(operation):
        example = BODIES.get((operation.method, operation.path))
        if example is None:
            pytest.fail(f"no example body for {operation}: add a minimal valid one to BODIES in {__name__}")
        body = example(objects)
    return url, body, getattr(client, operation.method.lower())(url, body, format="json")


def assert_no_leak(role: str, url: str, body, response):
    """An outsider sees nothing of vision; vision's people nothing of nlp (beyond what they sent)."""
    markers = {
        "outsider": Objects.VISION_MARKERS,
        "member": Objects.NLP_MARKERS,
        "dept_admin": Objects.NLP_MARKERS,
    }.get(role, ())
    sent = url + json.dumps(body)
    text = response.content.decode(errors="replace")
    leaked = marker_found([m for m in markers if not marker_found([m], sent)], text)
    assert leaked is None, f"{role} got {leaked!r} in the answer to {url}: {text[:500]}"


@pytest.mark.parametrize(("operation", "role"), CASES)
def test_each_role_gets_exactly_what_the_rules_allow(portal, operation, role):
    world, objects = portal
    try:
        url, body, response = call(client_for(world, role), operation, objects)
    except MissingFixture as exc:
        pytest.fail(str(exc))
    want = expected(operation, role)
    got = response.status_code
    detail = f"{operation} as {role}: {got} {response.content[:300]!r}"
    if want == "2xx":
        assert 200 <= got < 300, detail
    else:
        assert got in want, f"{detail}; expected one of {sorted(want)}"
    assert_no_leak(role, url, body, response)
    if role == "outsider" and "department" in operation.query and operation.method == "GET":
        # Asking a list for vision's objects by name gets nothing of them either.
        url, body, response = call(client_for(world, role), operation, objects, query="?department=vision")
        assert response.status_code in (200, 404), f"{url}: {response.status_code}"
        assert_no_leak(role, url, body, response)


def test_every_path_parameter_has_a_fixture(portal):
    _, objects = portal
    problems = []
    for operation in operations():
        try:
            fill_path(operation.path, objects)
        except MissingFixture as exc:
            problems.append(str(exc))
    assert not problems, "\n".join(sorted(set(problems)))


def test_every_operation_with_a_body_has_an_example():
    missing = [str(op) for op in operations() if has_body(op) and (op.method, op.path) not in BODIES]
    assert not missing, f"add minimal valid bodies to BODIES for: {missing}"


def test_the_schema_and_the_docs_are_the_only_other_public_pages(portal):
    world, _ = portal
    anonymous = client_for(world, "anonymous")
    assert anonymous.get("/api/v1/schema/").status_code == 200
    assert anonymous.get("/api/v1/docs/").status_code == 200
    assert anonymous.get("/api/v1/me/").status_code == 401


def test_the_leak_markers_do_show_up_for_those_allowed_to_see_them(portal):
    """Otherwise an outsider's clean answers would prove nothing."""
    world, objects = portal
    seen = ""
    for role in ("member", "dept_admin", "platform_admin"):
        client = client_for(world, role)
        for operation in operations():
            if operation.method == "GET":
                seen += client.get(fill_path(operation.path, objects)).content.decode(errors="replace")
    never_shown = {"whsec_vision"}  # a webhook's secret is shown once, when made
    missing = [m for m in Objects.VISION_MARKERS if m not in never_shown and not marker_found([m], seen)]
    assert not missing, f"no GET shows {missing}: they cannot reveal a leak"


def test_downloads_hide_vision_from_an_outsider_in_every_form(portal):
    """Logs followed as a stream, and the usage CSV: the same rules as their JSON forms."""
    world, objects = portal
    bob = client_for(world, "outsider")
    assert bob.get(f"/api/v1/jobs/{objects.job.pk}/logs/?follow=1").status_code == 404
    assert bob.get(f"/api/v1/image-builds/{objects.build.pk}/logs/").status_code == 404
    assert bob.get("/api/v1/usage/?department=vision&format=csv").status_code == 404
    csv = bob.get("/api/v1/usage/?format=csv&group_by=user")
    assert csv.status_code == 200 and marker_found(Objects.VISION_MARKERS, csv.content.decode()) is None
