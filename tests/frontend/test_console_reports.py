"""The admin console's reports: the usage report (chart, CSV links, date errors) and the audit log."""

import re

from django.test import Client

from accounts.models import AuditEvent
from tests.frontend.console_helpers import browser, submit, text

# --- Usage report ---------------------------------------------------------------------------------


def test_the_usage_page_draws_the_chart_from_portal_assets_and_links_csv(world):
    submit(world, world.alice, gpus_per_worker=2)
    page = browser(world.carol).get("/console/usage/")
    assert page.status_code == 200
    html = text(page)
    assert 'id="usage-chart"' in html and 'id="usage-chart-data"' in html
    assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', html)
    assert "/static/frontend/vendor/uplot/uPlot.iife.min.js" in assets
    assert "alice" in html  # the by-user table: her job holds GPUs now
    links = dict(re.findall(r'<a href="(/api/v1/usage/\?[^"]+)" download>([^<]+)</a>', html))
    assert sorted(links.values()) == ["by GPU type", "by day", "by user"]
    by_user = next(url for url, label in links.items() if label == "by user").replace("&amp;", "&")
    download = browser(world.carol).get(by_user)
    assert download.status_code == 200 and download["Content-Type"].startswith("text/csv")
    lines = download.content.decode().splitlines()
    assert lines[0] == "department,user,gpu_hours" and lines[1].startswith("vision,alice,")
    for asset in assets:  # last: closing a file response ends the request, and with it the database connection
        assert asset.startswith("/static/"), asset
        response = Client().get(asset)
        assert response.status_code == 200
        response.close()


def test_the_usage_page_keeps_to_the_departments_one_manages(world):
    assert browser(world.carol).get("/console/usage/?department=nlp").status_code == 404
    assert browser(world.admin).get("/console/usage/?department=nlp").status_code == 200
    html = text(browser(world.carol).get("/console/usage/"))
    assert "vision: 0" in html and "nlp" not in re.sub(r"<nav.*?</nav>", "", html, flags=re.S)


def test_the_usage_page_says_what_is_wrong_with_the_dates(world):
    response = browser(world.carol).get("/console/usage/?from=2025-03-12&to=2025-03-10")
    assert response.status_code == 400
    assert "&#x27;from&#x27; (2025-03-12) is after &#x27;to&#x27; (2025-03-10)." in text(response)
    assert 'id="usage-chart"' not in text(response)


# --- Audit log --------------------------------------------------------------------------------------


def test_the_audit_log_shows_changes_and_cancellations_by_others_within_ones_departments(world):
    job = submit(world, world.alice)
    assert world.api(world.carol).post(f"/api/v1/jobs/{job['id']}/cancel/").status_code == 200
    browser(world.carol).post("/console/departments/vision/members/", {"username": "bob", "role": "member"})
    browser(world.admin).post("/console/departments/nlp/members/", {"username": "alice", "role": "member"})
    carol = text(browser(world.carol).get("/console/audit/"))
    assert "job.cancel" in carol and f"job {job['id']} (q)" in carol and "membership.add" in carol
    assert "alice</td>" not in carol.split("membership.add")[-1]  # the nlp event is not hers to read
    only_jobs = text(browser(world.carol).get("/console/audit/?action=job"))
    assert "job.cancel" in only_jobs and "<code>membership.add</code>" not in only_jobs
    admin = browser(world.admin)
    everything = text(admin.get("/console/audit/"))
    assert everything.count("<code>membership.add</code>") == 2
    assert text(admin.get("/console/audit/?department=nlp")).count("<code>membership.add</code>") == 1
    assert browser(world.carol).get("/console/audit/?department=nlp").status_code == 404
    assert "No changes match these filters." in text(admin.get("/console/audit/?action=storage"))


def test_the_audit_log_is_paginated(world):
    AuditEvent.objects.bulk_create(
        AuditEvent(actor=world.admin, department=None, action="quota.set", target=f"t{index}") for index in range(60)
    )
    first = text(browser(world.admin).get("/console/audit/"))
    assert "Page 1 of 2" in first and first.count("<code>quota.set</code>") == 50
    second = text(browser(world.admin).get("/console/audit/?page=2"))
    assert second.count("<code>quota.set</code>") == 10


def test_the_audit_log_has_an_empty_state(world):
    assert "Nothing has been changed yet." in text(browser(world.carol).get("/console/audit/"))
