"""The submit form's live start preview (issue 18 item 5): as the fields change, the form says whether the job
would start now, else why and about when, and which change would start it sooner; nothing is submitted."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser.conftest import screenshot


def test_the_form_says_when_the_job_would_start_as_the_fields_change(visitor):
    page = visitor.sign_in("alice")
    page.goto("/jobs/new/")
    preview = page.locator("#job-preview")
    # Only the sizing matters: no name, code or command yet, and the form still answers.
    expect(preview).to_contain_text(re.compile(r"Would (start now|wait:)"))

    page.get_by_label("Priority").select_option("high")
    page.get_by_label("GPUs per worker").fill("8")  # typing is enough: no change event, no submit
    # Work that cannot be preempted runs only within vision's nominal quota (4 GPUs): 8 never start.
    expect(preview).to_contain_text("Would wait: Quota used up; no estimate of when")
    expect(preview.locator("[data-preview-alternatives]")).to_contain_text("Starts sooner with 4 GPUs per worker:")
    screenshot(page, "30-submit-form-start-preview")

    page.get_by_label("GPUs per worker").fill("2.5")
    expect(preview).to_contain_text("Fix these to see when the job would start:")
    expect(preview).to_contain_text("GPUs per worker: Above 1, ask for a whole number of GPUs per worker.")
    expect(page).to_have_url(re.compile(r"/jobs/new/$"))  # still the form: nothing was submitted
