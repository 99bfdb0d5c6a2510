"""The JSON API answers its errors in JSON (config/errors.py, core/api.py), never Django's HTML page; pages keep
theirs. JSON bodies nested deeper than PORTAL_JSON_MAX_DEPTH, or holding a NUL, are a 400 naming why
(core/parsers.py), a 100,000-deep document included (json.loads alone raises RecursionError: a 500)."""

from __future__ import annotations

import json
from unittest import mock

import pytest
from django.test import Client, RequestFactory

from config import errors

pytestmark = pytest.mark.django_db

DEEP = "[" * 100_000 + "]" * 100_000


def nested(depth: int) -> str:
    return json.dumps({"name": "deep", "extra": json.loads("[" * (depth - 1) + "]" * (depth - 1))})


def detail(response) -> str:
    assert response["Content-Type"] == "application/json", response.content[:300]
    return response.json()["detail"]


def test_an_unknown_api_path_is_a_json_404_and_an_unknown_page_stays_a_page(world):
    api = world.api(world.alice)
    assert detail(api.get("/api/v1/no-such-thing/")) == (
        "There is no /api/v1/no-such-thing/ in the API. The paths are listed at /api/v1/docs/."
    )
    assert api.get("/api/v1/no-such-thing/").status_code == 404
    page = Client().get("/no-such-page/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")


def test_405_and_403_are_json(world):
    api = world.api(world.alice)
    response = api.delete("/api/v1/jobs/")
    assert response.status_code == 405 and detail(response)
    response = api.get("/api/v1/audit/")
    assert response.status_code == 403
    assert detail(response) == "The audit log is for department and platform admins."
    request = RequestFactory().get("/api/v1/anything/")
    assert json.loads(errors.permission_denied(request).content) == {"detail": "You do not have permission to do this."}


def test_a_body_django_refuses_is_a_json_400(world, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = world.api(world.alice).post("/api/v1/jobs/", {"name": "x" * 2000}, format="multipart")
    assert response.status_code == 400
    assert detail(response) == "The request body is larger than the 1000 bytes the portal accepts. Send a smaller body."
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 3
    response = world.api(world.alice).get("/api/v1/jobs/?a=1&b=2&c=3&d=4")
    assert response.status_code == 400
    assert detail(response) == "The request has more fields than the portal accepts. Send fewer fields, or send JSON."


def test_a_disallowed_host_is_a_json_400():
    response = Client(HTTP_HOST="evil.example").get("/api/v1/jobs/")
    assert response.status_code == 400
    assert "could not accept this request" in detail(response)


def test_malformed_json_is_a_json_400(world):
    response = world.api(world.alice).post("/api/v1/jobs/", '{"name": ', content_type="application/json")
    assert response.status_code == 400 and detail(response).startswith("JSON parse error")


def test_a_server_error_is_json_under_the_api_and_a_page_elsewhere(world):
    api = world.api(world.alice)
    api.raise_request_exception = False
    with mock.patch("jobs.api.JobListApi.get_queryset", side_effect=RuntimeError("boom")):
        response = api.get("/api/v1/jobs/")
    assert response.status_code == 500
    assert detail(response).startswith("The portal failed on this request (a server error, logged for its operators)")
    browser = Client(raise_request_exception=False)
    browser.force_login(world.alice)
    with mock.patch("frontend.views.selectors.jobs_for", side_effect=RuntimeError("boom")):
        page = browser.get("/jobs/")
    assert page.status_code == 500 and page["Content-Type"].startswith("text/html")


def test_a_100000_deep_json_document_is_a_400_naming_the_limit(world):
    response = world.api(world.alice).post("/api/v1/jobs/", DEEP, content_type="application/json")
    assert response.status_code == 400
    assert detail(response) == (
        "The JSON body nests arrays and objects more than 32 levels deep; the portal accepts at most 32 "
        "(PORTAL_JSON_MAX_DEPTH). Send a flatter document."
    )


def test_the_depth_limit_is_a_setting_and_the_limit_itself_is_accepted(world, settings):
    api = world.api(world.alice)
    deepest = api.post("/api/v1/jobs/", nested(32), content_type="application/json")
    assert deepest.status_code == 400 and "extra" in deepest.json()  # the submission's own checks ran
    assert "levels deep" in detail(api.post("/api/v1/jobs/", nested(33), content_type="application/json"))
    settings.PORTAL_JSON_MAX_DEPTH = 4
    assert "at most 4 " in detail(api.post("/api/v1/jobs/", nested(5), content_type="application/json"))
    assert "extra" in api.post("/api/v1/jobs/", nested(4), content_type="application/json").json()


def test_brackets_inside_strings_do_not_count(world):
    body = json.dumps({"name": "[" * 1000 + '"\\' + "{" * 1000, "command": "]]]"})
    response = world.api(world.alice).post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400 and "detail" not in response.json()  # the submission's checks


def test_nul_in_a_json_string_or_key_is_a_400_naming_the_field(world):
    api = world.api(world.alice)
    body = '{"name": "ok", "env": {"A": "x\\u0000y"}}'
    response = api.post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400
    assert detail(response) == (
        "The JSON field 'env.A' contains a NUL character (\\u0000), which the portal does not accept. Remove it."
    )
    response = api.post("/api/v1/jobs/", '{"na\\u0000me": 1}', content_type="application/json")
    assert detail(response).startswith("The JSON field 'na\\u0000me' contains a NUL character")
    response = api.post("/api/v1/jobs/", '"\\u0000"', content_type="application/json")
    assert detail(response).startswith("The JSON body contains a NUL character")
