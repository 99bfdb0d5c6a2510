"""The portal's own error pages (frontend/error_pages.py, config/errors.py): what happened and what to do, with the
portal's navigation, the right status, JSON under /api/; the 500 page renders with the database down."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import OperationalError
from django.test import Client, RequestFactory

from config import errors
from jobs.models import Job

pytestmark = pytest.mark.django_db

NAVIGATION = 'aria-label="Main"'


def browser(user=None) -> Client:
    client = Client(raise_request_exception=False)
    if user is not None:
        client.force_login(user)
    return client


def page(response) -> str:
    assert response["Content-Type"].startswith("text/html"), response["Content-Type"]
    return response.content.decode()


def other_departments_job(world) -> Job:
    """A job of nlp (bob's department), which alice and carol (vision) do not see."""
    response = world.api(world.bob).post(
        "/api/v1/jobs/",
        {"name": "nlp-only", "department": "nlp", "code_url": "https://git.example.com/t/r.git", "command": "true"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def test_another_departments_job_is_a_styled_404_with_the_navigation(world):
    job = other_departments_job(world)
    response = browser(world.alice).get(f"/jobs/{job.pk}/")
    assert response.status_code == 404
    text = page(response)
    assert NAVIGATION in text and "portal.css" in text
    assert '<h1 id="error-heading">Page not found</h1>' in text
    assert "No job with that id in your departments." in text
    assert "The job does not exist or belongs to a department you are not in." in text
    assert 'href="/jobs/">See your jobs</a>' in text
    assert "nlp-only" not in text  # nothing of the job itself
    assert browser(world.bob).get(f"/jobs/{job.pk}/").status_code == 200


@pytest.mark.parametrize("path", ["/jobs/999999/", "/jobs/abc/", "/jobs/new/?clone=abc"])
def test_a_mistyped_job_id_is_the_same_page(world, path):
    response = browser(world.alice).get(path)
    assert response.status_code == 404
    text = page(response)
    assert NAVIGATION in text
    assert "The job does not exist or belongs to a department you are not in." in text


def test_an_unknown_page_says_so_and_leads_to_the_dashboard(world):
    text = page(browser(world.carol).get("/no-such-page/"))
    assert "There is no page at this address." in text
    assert 'href="/">Go to the dashboard</a>' in text


def test_the_console_as_a_plain_member_is_a_styled_403(world):
    response = browser(world.alice).get("/console/")
    assert response.status_code == 403
    text = page(response)
    assert NAVIGATION in text
    assert "You may not open this page" in text
    assert "The admin console is for department admins and platform admins." in text
    assert "ask an admin of your department" in text


def test_djangos_own_texts_are_not_shown(world):
    text = page(browser(world.bob).get("/console/departments/nlp/members/999999/remove/"))
    assert "matches the given query" not in text


def test_anonymous_visitors_are_sent_to_sign_in_where_a_page_needs_it(world):
    job = other_departments_job(world)
    response = browser().get(f"/jobs/{job.pk}/")
    assert response.status_code == 302 and response["Location"] == f"/login/?next=/jobs/{job.pk}/"
    assert browser().get("/console/").status_code == 302
    response = browser().get("/jobs/abc/")  # no such page for anyone: a 404 that offers to sign in
    assert response.status_code == 404
    text = page(response)
    assert 'href="/login/?next=%2Fjobs%2Fabc%2F">Sign in</a>' in text
    assert NAVIGATION not in text  # the navigation is for signed-in users


def test_the_pages_are_translated(world):
    client = browser(world.alice)
    client.cookies["django_language"] = "zh-hans"
    text = page(client.get("/jobs/999999/"))
    assert '<html lang="zh-hans">' in text


def test_the_api_keeps_answering_json(world):
    api = world.api(world.alice)
    response = api.get("/api/v1/no-such-thing/")
    assert response.status_code == 404 and response["Content-Type"] == "application/json"
    job = other_departments_job(world)
    response = api.get(f"/api/v1/jobs/{job.pk}/")
    assert response.status_code == 404 and response.json() == {"detail": "No job with that id in your departments."}
    response = api.get("/api/v1/audit/")
    assert response.status_code == 403 and "detail" in response.json()
    api.raise_request_exception = False
    with mock.patch("jobs.api.JobListApi.get_queryset", side_effect=RuntimeError("boom")):
        response = api.get("/api/v1/jobs/")
    assert response.status_code == 500 and response.json()["detail"].startswith("The portal failed on this request")


def test_a_form_without_its_csrf_token_gets_the_portals_page(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.alice)
    response = client.post("/jobs/new/", {"name": "x"})
    assert response.status_code == 403
    text = page(response)
    assert "The form could not be sent" in text and "reload the page and send the form again" in text
    assert NAVIGATION in text
    request = RequestFactory().post("/api/v1/jobs/")
    response = errors.csrf_failure(request, "CSRF cookie not set.")
    assert response.status_code == 403 and response["Content-Type"] == "application/json"


def test_a_server_error_is_the_portals_page_and_needs_no_database(world):
    client = browser(world.alice)
    with mock.patch("frontend.views.selectors.jobs_for", side_effect=RuntimeError("boom")):
        response = client.get("/jobs/")
    assert response.status_code == 500
    text = page(response)
    assert "Something went wrong on the portal" in text and "tell your platform admins" in text
    assert 'href="/jobs/">Jobs</a>' in text  # the portal's links, without anything of the user
    request = RequestFactory().get("/jobs/")
    with mock.patch("django.db.backends.base.base.BaseDatabaseWrapper.ensure_connection", side_effect=OperationalError):
        response = errors.server_error(request)
    assert response.status_code == 500 and "Something went wrong on the portal" in page(response)


def test_a_404_with_the_database_down_still_answers(world):
    request = RequestFactory().get("/jobs/1/")
    request.user = world.alice
    with mock.patch("django.db.backends.base.base.BaseDatabaseWrapper.ensure_connection", side_effect=OperationalError):
        response = errors.page_not_found(request, None)
    assert response.status_code == 404
    text = page(response)
    assert "The job does not exist" in text and NAVIGATION in text
    assert "Your departments" not in text  # the per-user parts needed the database


def test_a_request_the_portal_refuses_gets_the_page_without_the_request():
    response = Client(HTTP_HOST="evil.example").get("/jobs/")
    assert response.status_code == 400
    assert "The portal could not accept this request" in page(response)


def test_the_api_docs_have_a_way_back_to_the_portal(client):
    text = client.get("/api/v1/docs/").content.decode()
    assert 'class="back" href="/">← Back to the portal</a>' in text
    assert 'href="/tokens/">API tokens</a>' in text
