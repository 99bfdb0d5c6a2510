"""Quota loans in the console: a department admin lends GPUs to another department, sees the loan on the loans
page and on the quota bars, then ends it early through the confirmation page (the loan is gone from both)."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.conftest import screenshot


def test_a_department_admin_lends_gpus_and_ends_the_loan_early(visitor):
    page = visitor.sign_in("carol")
    page.goto("/console/")
    page.get_by_role("link", name="Quota loans").first.click()
    expect(page.get_by_role("heading", name="Lend GPUs")).to_be_visible()
    expect(page.locator("main")).to_contain_text("No active loans")

    # More than vision's nominal is refused on its field, with what may be lent.
    page.get_by_label("Lend to").select_option("nlp")
    page.get_by_label("GPUs").fill("99")
    page.get_by_role("button", name="Lend").click()
    expect(page.locator(".field.has-error")).to_contain_text("can be lent")

    page.get_by_label("GPUs").fill("1")
    page.get_by_role("button", name="Lend").click()
    expect(page.locator(".messages")).to_contain_text("1 GPU of local/sim lent to nlp.")
    active = page.locator("section", has=page.get_by_role("heading", name="Active loans")).locator("tbody tr")
    expect(active).to_have_count(1)
    expect(active).to_contain_text("lent 1 GPU to nlp")
    screenshot(page, "loans-console")

    page.get_by_role("link", name="Quotas", exact=True).click()
    expect(page.locator("tr.quota-loans")).to_contain_text("lent 1 GPU to nlp until")
    screenshot(page, "loans-quota-bars")

    page.get_by_role("link", name="Quota loans").first.click()
    active.get_by_role("link", name="End now").click()
    expect(page.get_by_role("heading", level=2)).to_have_text("End the loan of 1 GPU to nlp now?")
    page.get_by_role("button", name="End the loan").click()
    expect(page.locator(".messages")).to_contain_text("has ended: it is back.")
    expect(page.locator("main")).to_contain_text("No active loans")
    past = page.locator("section", has=page.get_by_role("heading", name="Past loans")).locator("tbody tr")
    expect(past.first).to_contain_text("ended early by carol")
