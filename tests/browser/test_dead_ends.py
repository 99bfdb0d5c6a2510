"""No dead ends: another department's job, a mistyped id, the console as a plain member and TensorBoard's refusals
are the portal's own pages with its navigation, the right status and a way on; the API docs lead back."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Visitor, screenshot

JOB_GONE = "The job does not exist or belongs to a department you are not in."


@pytest.fixture(scope="module")
def nlp_jobs(browser, portal) -> list[int]:
    """Two jobs of nlp (bob's department), submitted by bob through the REST API with his session."""
    visitor = Visitor(browser, portal)
    page = visitor.sign_in("bob")
    ids = []
    for name in ("nlp-private", "nlp-second"):
        job = {
            "name": name,
            "department": "nlp",
            "code_url": portal.example_repo,
            "command": "true",
            "gpus_per_worker": 0,
        }
        response = page.request.post("/api/v1/jobs/", data=json.dumps(job), headers=api_headers(page))
        assert response.status == 201, response.text()
        ids.append(response.json()["id"])
    shown = page.goto(f"/jobs/{ids[0]}/")
    assert shown is not None and shown.status == 200  # there for nlp's members
    visitor.close()
    return ids


@pytest.fixture(scope="module")
def nlp_job(nlp_jobs) -> int:
    return nlp_jobs[0]


def api_headers(page: Page) -> dict[str, str]:
    """What the REST API wants of a request authenticated by the session: the page's CSRF token."""
    token = page.locator("header.topbar form.signout input[name=csrfmiddlewaretoken]").first.get_attribute("value")
    return {"Content-Type": "application/json", "X-CSRFToken": token or ""}


def main_navigation(page: Page):
    return page.get_by_role("navigation", name="Main")


def test_another_departments_job_is_the_portals_404_with_its_navigation(visitor, nlp_job):
    page = visitor.sign_in("alice")
    response = page.goto(f"/jobs/{nlp_job}/")
    assert response.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Page not found")
    expect(page.locator("main")).to_contain_text("No job with that id in your departments.")
    expect(page.locator("main")).to_contain_text(JOB_GONE)
    expect(page.locator("main")).not_to_contain_text("nlp-private")
    expect(main_navigation(page).get_by_role("link", name="Jobs", exact=True)).to_be_visible()
    expect(page.get_by_role("navigation", name="Your departments")).to_contain_text("vision")
    screenshot(page, "dead-ends-404-other-department")
    page.get_by_role("link", name="See your jobs").click()
    expect(page).to_have_url(re.compile(r"/jobs/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Jobs")


def test_a_mistyped_job_id_and_an_unknown_address_say_what_to_do(visitor):
    page = visitor.sign_in("carol")
    assert page.goto("/jobs/12x/").status == 404
    expect(page.locator("main")).to_contain_text(JOB_GONE)
    expect(main_navigation(page)).to_be_visible()
    assert page.goto("/no-such-page/").status == 404
    expect(page.locator("main")).to_contain_text("There is no page at this address.")
    page.get_by_role("link", name="Go to the dashboard").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Welcome, carol")


def test_the_console_as_a_plain_member_is_the_portals_403(visitor):
    page = visitor.sign_in("alice")
    assert page.goto("/console/").status == 403
    expect(page.get_by_role("heading", level=1)).to_have_text("You may not open this page")
    expect(page.locator("main")).to_contain_text("The admin console is for department admins and platform admins.")
    expect(main_navigation(page)).to_be_visible()
    screenshot(page, "dead-ends-403-console")


def test_an_anonymous_visitor_is_sent_to_sign_in(visitor, nlp_job):
    page = visitor.page()
    page.goto(f"/jobs/{nlp_job}/")
    expect(page).to_have_url(re.compile(rf"/login/\?next=/jobs/{nlp_job}/$"))
    assert page.goto("/jobs/12x/").status == 404
    page.get_by_role("link", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/login/\?next="))


def test_tensorboard_of_another_department_is_a_page_too(visitor, nlp_job):
    page = visitor.sign_in("alice")
    response = page.goto(f"/tensorboard/{nlp_job}/")
    assert response.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("TensorBoard not found")
    expect(page.locator("main")).to_contain_text("No TensorBoard with that id in your departments.")
    expect(main_navigation(page)).to_be_visible()
    screenshot(page, "dead-ends-404-tensorboard")


def test_the_api_docs_lead_back_to_the_portal(visitor):
    page = visitor.sign_in("alice")
    page.goto("/api/v1/docs/")
    expect(page.locator("#swagger-ui")).to_contain_text("GPU Portal API", timeout=30_000)
    screenshot(page, "dead-ends-api-docs")
    page.get_by_role("link", name="Back to the portal").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Welcome, alice")


def test_a_comparison_opens_in_the_portal_with_tensorboards_settings_pane_closed(visitor, nlp_jobs):
    page = visitor.sign_in("bob")
    response = page.request.post(
        "/api/v1/tensorboards/", data=json.dumps({"jobs": nlp_jobs}), headers=api_headers(page)
    )
    assert response.status == 200, response.text()
    board = response.json()
    assert page.evaluate("localStorage.getItem('_tb_global_settings')") is None
    page.goto(f"/tensorboards/{board['id']}/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Comparing 2 jobs in TensorBoard")
    expect(main_navigation(page)).to_be_visible()
    frame = page.frame_locator("iframe.tensorboard")
    expect(frame.locator("body")).not_to_contain_text("TensorBoard is starting", timeout=90_000)  # then the board
    settings = json.loads(page.evaluate("localStorage.getItem('_tb_global_settings')"))
    assert settings["timeSeriesSettingsPaneOpened"] is False
    screenshot(page, "dead-ends-compare-page")
    page.get_by_role("link", name="nlp-second").click()
    expect(page).to_have_url(re.compile(rf"/jobs/{nlp_jobs[1]}/$"))
