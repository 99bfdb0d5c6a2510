"""Schemathesis over the whole API, in-process through Django's WSGI handler, as a platform admin and as a member.

Every operation of the generated OpenAPI document gets EXAMPLES generated requests per role; the checks are
that no answer is a server error and that every answer matches the schema's declared responses. Requests hit
the matrix's world (objects.py), so small ids and the fixtures' names reach real objects now and then.
"""

from __future__ import annotations

import json

import pytest
import schemathesis
from django.core import signals
from django.core.cache import cache
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from accounts.tokens import token_create
from tensorboards import services as boards
from tensorboards.models import TensorBoard
from tests.security.objects import world_with_objects
from tests.security.schema_ops import openapi

pytestmark = pytest.mark.django_db

EXAMPLES = 12
CHECKS = [not_a_server_error, response_schema_conformance]


def fuzzed_document() -> dict:
    """The OpenAPI document without its multipart request bodies: werkzeug's test client (which schemathesis
    uses for WSGI apps) leaves the temporary files of generated multipart bodies open, and warnings are errors
    here. JSON and urlencoded bodies, which the same parsers read, are still sent."""
    document = json.loads(json.dumps(openapi(), default=str))
    for item in document["paths"].values():
        for operation in item.values():
            operation.get("requestBody", {}).get("content", {}).pop("multipart/form-data", None)
    return document


schema = schemathesis.openapi.from_dict(fuzzed_document())


@pytest.fixture(scope="module")
def shared(django_db_setup, django_db_blocker, tmp_path_factory):
    with world_with_objects(django_db_blocker, tmp_path_factory.mktemp("fuzz")) as (world, objects):
        yield world, objects


@pytest.fixture
def app(shared, db, settings):
    # Django's handler closes "old" connections at each request; inside the test's transaction that would
    # close it, so it is switched off while the test runs, as django.test.Client does.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    rates = {scope: "1000000/minute" for scope in settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    settings.ALLOWED_HOSTS = ["*"]
    cache.clear()
    yield get_wsgi_application()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)
    for board in TensorBoard.objects.exclude(pid=None):  # a generated id can name a real job
        boards.board_stop(board=board)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
def test_no_server_error_and_answers_as_documented(app, shared, case):
    world, _ = shared
    for user in (world.admin, world.alice):
        # A new key each time: a generated DELETE /tokens/{id}/ may revoke the one used before.
        _, key = token_create(user=user, name="fuzz")
        response = case.call(app=app, headers={"Authorization": f"Token {key}"})
        case.validate_response(response, checks=CHECKS)
