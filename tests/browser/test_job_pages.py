"""The job pages in a browser (issue 17): registering a model version from a succeeded job's page, the jobs list's
sorting from its column headers, and bulk cancel with its confirmation."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Visitor, screenshot

START_DEADLINE_MS = 150_000  # the example's venv may be built on this job's run
SLEEPER = 'python -c "import time; time.sleep(600)"'


def _submit(page: Page, portal, name: str, command: str) -> int:
    page.goto("/jobs/new/")
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Code URL", exact=True).fill(portal.example_repo)
    page.get_by_label("Command", exact=True).fill(command)
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".messages")).to_contain_text(f"Job {name} submitted.")
    found = re.fullmatch(r".*/jobs/(\d+)/", page.url)
    assert found, page.url
    return int(found.group(1))


@pytest.fixture(scope="module")
def finished_job(browser, portal) -> int:
    """alice's examples/digits run, submitted from the form and watched until it succeeded."""
    visitor = Visitor(browser, portal)
    page = visitor.sign_in("alice")
    job_id = _submit(page, portal, "digits-register", "python train.py --epochs 2")
    expect(page.locator("#job-live .status")).to_have_text("Succeeded", timeout=START_DEADLINE_MS)
    visitor.close()
    return job_id


def test_a_version_is_registered_from_the_job_page(visitor, finished_job):
    page = visitor.sign_in("alice")
    page.goto(f"/jobs/{finished_job}/")
    facts = page.locator("dl.facts")
    expect(facts).to_contain_text(re.compile(r"Run time\s*\d+ (s|min)"))
    expect(facts).to_contain_text(re.compile(r"GPU time\s*[\d.]+ GPU-(minutes?|hours?)"))
    screenshot(page, "job-page-succeeded")
    page.get_by_role("link", name="Register as model version").click()
    form = page.locator("section#register")
    expect(form).to_be_visible()
    # The job's output files, with their sizes; the model file at the top is picked.
    row = form.locator("tr", has=page.get_by_text("model.joblib", exact=True))
    expect(row).to_contain_text(re.compile(r"\d+(\.\d+)?\s(bytes|KB|MB)"))
    expect(row.get_by_role("radio")).to_be_checked()
    expect(form.get_by_label("Framework")).to_have_value("sklearn")
    screenshot(page.locator("section#register"), "job-register-form")

    # A name the registry refuses: the error is on the form, and what was typed stays.
    form.get_by_label("Model", exact=True).fill("Digits Model")
    form.get_by_label("Framework").select_option("other")
    form.get_by_role("button", name="Register version").click()
    form = page.locator("section#register")
    expect(form.get_by_role("alert")).to_contain_text("The version was not registered.")
    expect(form).to_contain_text("is not a valid model name")
    expect(form.get_by_label("Model", exact=True)).to_have_value("Digits Model")
    expect(form.get_by_label("Framework")).to_have_value("other")

    form.get_by_label("Model", exact=True).fill("digits-from-page")
    form.get_by_label("Framework").select_option("sklearn")
    form.get_by_role("button", name="Register version").click()
    expect(page).to_have_url(re.compile(r"/models/digits-from-page/versions/1/$"))
    expect(page.locator(".messages")).to_contain_text(
        "Version 1 of digits-from-page registered from job digits-register"
    )
    screenshot(page, "job-registered-version")


def test_the_jobs_list_sorts_from_its_column_headers(visitor, finished_job):
    page = visitor.sign_in("alice")
    page.goto("/jobs/")
    header = page.locator("th", has=page.get_by_role("link", name="Job", exact=True))
    expect(page.locator('th[aria-sort="descending"]')).to_contain_text("Submitted")
    page.get_by_role("link", name="Job", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\?sort=name$"))
    expect(header).to_have_attribute("aria-sort", "ascending")
    names = page.locator("#job-rows tbody tr td:nth-child(2) a").all_inner_texts()
    assert names == sorted(names)
    page.get_by_role("link", name="Job", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\?sort=-name$"))
    expect(header).to_have_attribute("aria-sort", "descending")
    names = page.locator("#job-rows tbody tr td:nth-child(2) a").all_inner_texts()
    assert names == sorted(names, reverse=True)

    page.get_by_role("link", name="Duration").click()
    expect(page).to_have_url(re.compile(r"/jobs/\?sort=-duration$"))
    row = page.locator("tr", has=page.get_by_role("link", name="digits-register"))
    expect(row).to_contain_text(re.compile(r"\d+ s|\d+ min"))  # its duration, in words
    screenshot(page, "jobs-list-sorted")


def test_bulk_cancel_asks_with_the_number_of_jobs_then_cancels_them(visitor, portal, finished_job):
    page = visitor.sign_in("alice")
    first = _submit(page, portal, "bulk-one", SLEEPER)
    second = _submit(page, portal, "bulk-two", SLEEPER)
    page.goto("/jobs/?q=bulk-")
    cancel = page.locator("[data-bulk-cancel]")
    expect(cancel).to_be_disabled()
    page.get_by_label("Select bulk-one").check()
    expect(cancel).to_have_text("Cancel 1 selected job…")
    page.get_by_label("Select bulk-two").check()
    expect(cancel).to_have_text("Cancel 2 selected jobs…")
    cancel.click()

    expect(page.get_by_role("heading", level=2)).to_have_text("Cancel 2 jobs?")
    expect(page.locator("main")).to_contain_text("bulk-one")
    expect(page.locator("main")).to_contain_text("bulk-two")
    screenshot(page, "jobs-bulk-cancel-confirm")
    page.get_by_role("button", name="Cancel 2 jobs").click()

    expect(page).to_have_url(re.compile(r"/jobs/\?q=bulk-$"))
    expect(page.locator(".messages")).to_contain_text(
        f"Cancel requested for 2 jobs: bulk-one #{first}, bulk-two #{second}."
    )
    for name in ("bulk-one", "bulk-two"):
        row = page.locator("tr", has=page.get_by_role("link", name=name))
        expect(row).to_contain_text("Cancelled", timeout=60_000)  # the live list follows the cancel
