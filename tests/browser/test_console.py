"""The department admin console in the browser: a dept admin's usage report, a platform admin's quota change."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.conftest import screenshot


def test_a_department_admin_reads_the_usage_report(visitor):
    page = visitor.sign_in("carol")
    page.get_by_role("link", name="Admin console").click()
    page.get_by_role("link", name="Usage").first.click()
    expect(page.get_by_role("heading", level=1)).to_have_text("GPU usage")
    # The seeded vision job held 2 GPUs for 3 hours yesterday (the example job adds a little more).
    chart = page.locator("#usage-chart")
    expect(chart.locator("canvas").first).to_be_visible()
    expect(chart).to_contain_text("vision")  # the chart's legend names the department's series
    by_user = page.locator("section", has=page.get_by_role("heading", name="By user")).locator("tbody tr")
    expect(by_user.filter(has_text="carol")).to_have_text("carolvision6")
    page.get_by_text("GPU-hours by day as a table").click()
    by_day = page.locator("details table tbody tr")
    expect(by_day.filter(has_text="vision").filter(has_text="6").first).to_be_visible()
    expect(page.locator("main")).to_contain_text("GPU-hours in total")
    screenshot(page, "09-usage-report")


def test_a_platform_admin_previews_a_quota_change_then_saves_it(visitor):
    page = visitor.sign_in("admin")
    page.goto("/console/departments/nlp/quotas/")
    current = page.locator("section", has=page.get_by_role("heading", name="Quotas and live usage")).locator("tbody tr")
    expect(current).to_have_count(1)
    expect(current.locator("td").nth(2)).to_have_text("4")
    screenshot(page, "08-console-quotas")

    page.get_by_label("Nominal local/sim").fill("3")
    page.get_by_role("button", name="Preview the change").click()
    expect(page.get_by_role("heading", name="What would happen")).to_be_visible()
    proposed = page.locator("section#change table tbody tr")
    expect(proposed.locator("td").nth(2)).to_have_text("3")
    expect(page.get_by_role("heading", name="Running jobs that would be preempted")).to_be_visible()
    expect(current.locator("td").nth(2)).to_have_text("4")  # nothing saved yet
    screenshot(page, "08-console-quota-preview")

    page.get_by_role("button", name="Save these quotas").click()
    expect(page.locator(".messages")).to_contain_text("Quotas of nlp saved.")
    expect(current.locator("td").nth(2)).to_have_text("3")
    page.reload()
    expect(current.locator("td").nth(2)).to_have_text("3")
