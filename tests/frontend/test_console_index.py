"""The console's index lists every section a department admin has (issue 17, item 4), Webhooks included; a
platform admin finds the Django admin in the console's menu (the header keeps to one line); the usage report
and the audit log show values for people."""

from __future__ import annotations

import re

import pytest

from tests.frontend.console_helpers import browser, submit, text


@pytest.mark.django_db
def test_the_console_index_links_every_section_of_each_managed_department(world):
    page = text(browser(world.carol).get("/console/"))
    for path in ("members", "quotas", "storage", "webhooks"):
        assert f'href="/console/departments/vision/{path}/"' in page, path
    for path in ("/console/usage/?department=vision", "/console/audit/?department=vision", "/console/priorities/"):
        assert f'href="{path}"' in page, path
    assert "/console/departments/nlp/" not in page  # carol manages vision only
    assert 'href="/admin/"' not in page  # not a platform admin


@pytest.mark.django_db
def test_a_platform_admin_finds_the_platform_admin_in_the_console_not_in_the_header(world):
    home = text(browser(world.admin).get("/"))
    header = home.split("</header>")[0]
    assert 'href="/admin/"' not in header and 'href="/console/"' in header
    console = text(browser(world.admin).get("/console/"))
    menu = console.split('class="console-nav"')[1].split("</nav>")[0]
    assert 'href="/admin/">Platform admin</a>' in menu


@pytest.mark.django_db
def test_usage_and_audit_show_values_for_people(world):
    job = submit(world, world.carol)
    assert world.api(world.carol).post(f"/api/v1/jobs/{job['id']}/cancel/").status_code == 200  # audited
    usage = text(browser(world.carol).get("/console/usage/?department=vision"))
    assert re.search(r"<strong>\d[\d.,]* GPU-(hours|minutes?) in total</strong>", usage), usage
    audit = text(browser(world.carol).get("/console/audit/"))
    assert "When (UTC)" not in audit
    assert re.search(r'<time datetime="\d{4}-\d\d-\d\dT[^"]+" title="[^"]+">[^<]+</time>', audit), audit
