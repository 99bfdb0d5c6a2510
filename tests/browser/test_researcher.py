"""A researcher in the browser: sign in, submit the example job, watch it live, read its logs, open TensorBoard."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Visitor, screenshot
from tests.conftest import PASSWORD

# The venv of the example (numpy, scikit-learn, tensorboardX) is built on the job's first run.
START_DEADLINE_MS = 150_000
# Four epochs with a pause each keep the job `running` long enough to be seen.
COMMAND = "python train.py --epochs 4 --sleep-per-epoch 1.5"


@dataclass
class WatchedJob:
    page: Page  # the job page, opened right after submitting and never reloaded
    job_id: int
    seen: list[str]  # the statuses the page showed, in order


def job_status(page: Page):
    return page.locator("#job-live .status")


@pytest.fixture(scope="module")
def example_job(browser, portal) -> WatchedJob:
    """alice submits examples/digits from the form (Name, Code URL, Command only) and watches it to the end."""
    visitor = Visitor(browser, portal)
    page = visitor.sign_in("alice")
    page.get_by_role("link", name="Submit", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Submit a job")
    screenshot(page, "02-submit-form")
    page.get_by_label("Name", exact=True).fill("digits-browser")
    page.get_by_label("Code URL", exact=True).fill(portal.example_repo)
    page.get_by_label("Command", exact=True).fill(COMMAND)
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".messages")).to_contain_text("Job digits-browser submitted.")
    job_id = int(re.fullmatch(r".*/jobs/(\d+)/", page.url).group(1))
    # A marker that a reload would wipe: the statuses below must arrive without one.
    page.evaluate("window.__notReloaded = true")
    seen = [job_status(page).inner_text()]
    try:
        expect(job_status(page)).to_have_text("Running", timeout=START_DEADLINE_MS)
        seen.append("Running")
        expect(job_status(page)).to_have_text("Succeeded", timeout=60_000)
        seen.append("Succeeded")
    except AssertionError:
        # Module-scoped, so set up before the per-test evidence fixture: leave the evidence here.
        screenshot(page, "failed-example-job")
        print(portal.processes.logs()[-20_000:])
        raise
    yield WatchedJob(page, job_id, seen)
    visitor.close()


def test_signing_in_leads_to_the_page_asked_for(visitor):
    page = visitor.page()
    page.goto("/jobs/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/jobs/$"))
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("That username and password do not match an account. Try again.")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/jobs/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Jobs")

    page.get_by_role("link", name="Dashboard", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Welcome, alice")
    expect(page.get_by_role("navigation", name="Your departments")).to_contain_text("vision")
    screenshot(page, "01-dashboard")


def test_the_example_job_goes_to_running_and_succeeded_without_a_reload(example_job):
    page = example_job.page
    assert example_job.seen[0] in {"Queued", "Admitted", "Starting"}
    assert example_job.seen[1:] == ["Running", "Succeeded"]
    assert page.evaluate("window.__notReloaded") is True
    timeline = page.locator("ol.timeline")
    for status in ("queued", "admitted", "starting", "running", "succeeded"):
        expect(timeline).to_contain_text(status)
    expect(page.locator("dl.facts")).to_contain_text("Exit code")


def test_the_job_page_shows_the_jobs_logs(example_job):
    page = example_job.page
    output = page.locator("[data-logs-output]")
    expect(output).to_contain_text("epoch 4/4", timeout=30_000)
    expect(page.locator("[data-logs-state]")).to_have_text("End of the log: the job has ended.")
    # Following again reads the whole log from the start.
    page.get_by_role("button", name="Follow").click()
    expect(output).to_contain_text("epoch 1/4")
    expect(output).to_contain_text("epoch 4/4")
    screenshot(page, "04-job-page-with-logs")


def test_tensorboard_opens_on_the_job_page_with_the_loss_chart(example_job):
    page = example_job.page
    page.get_by_role("button", name="Open TensorBoard").click()
    frame = page.frame_locator("iframe.tensorboard")
    # TensorBoard starts on demand: the proxy answers 503 (refreshing itself) until it is up.
    expect(frame.get_by_text("digits-browser-").first).to_be_visible(timeout=90_000)  # the job's run
    # Cards below the fold are drawn lazily: filter the tags as a user looking for the loss would.
    tag_filter = frame.get_by_role("combobox", name="Filter tags (regex)")
    tag_filter.fill("loss")
    tag_filter.press("Escape")  # close the suggestions over the chart
    card = frame.locator("card-view, scalar-card-component, [class*=card]").filter(has_text="loss/train").first
    expect(card).to_be_visible(timeout=30_000)
    expect(card.locator("canvas, svg").first).to_be_visible()
    link = page.locator("[data-tensorboard-state] a")
    expect(link).to_have_text("Open TensorBoard in a new tab")
    expect(link).to_have_attribute("href", f"/tensorboard/{example_job.job_id}/")
    screenshot(page.locator("section[data-tensorboard]"), "05-tensorboard")


def test_the_main_pages_show_the_job_and_the_cluster(visitor, example_job):
    page = visitor.sign_in("alice")
    page.get_by_role("link", name="Jobs", exact=True).click()
    row = page.locator("tr", has=page.get_by_role("link", name="digits-browser"))
    expect(row).to_contain_text("Succeeded")
    screenshot(page, "03-jobs-list")

    page.get_by_role("link", name="Queue", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Queue")
    screenshot(page, "06-queue")

    page.get_by_role("link", name="Clusters", exact=True).click()
    page.get_by_role("link", name="local", exact=True).first.click()
    expect(page).to_have_url(re.compile(r"/clusters/local/$"))
    expect(page.locator("main")).to_contain_text("sim")
    screenshot(page, "07-cluster-map")

    page.get_by_role("link", name="API tokens").click()
    page.get_by_label("Name").fill("laptop")
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_label("Key")).not_to_have_value("")
    expect(page.locator("main")).to_contain_text("laptop")
    screenshot(page, "10-tokens")
