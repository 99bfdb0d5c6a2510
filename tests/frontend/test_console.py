"""The department admin console: who gets in, the overview, and members and roles.

The other sections: test_console_quotas.py (quotas, priority classes), test_console_storage.py,
test_console_reports.py (the usage report, the audit log).
"""

import pytest

from accounts.models import AuditEvent, Membership
from tests.frontend.console_helpers import audit_actions, browser, text

DEPARTMENT_PAGES = [
    "/console/departments/{slug}/members/",
    "/console/departments/{slug}/quotas/",
    "/console/departments/{slug}/storage/",
]
GLOBAL_PAGES = ["/console/", "/console/priorities/", "/console/usage/", "/console/audit/"]


# --- Who gets in -------------------------------------------------------------------------


@pytest.mark.parametrize("path", GLOBAL_PAGES + [p.format(slug="vision") for p in DEPARTMENT_PAGES])
def test_it_sends_anonymous_visitors_to_sign_in(client, world, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


@pytest.mark.parametrize("path", GLOBAL_PAGES)
def test_it_lets_dept_and_platform_admins_in_and_refuses_members(world, path):
    assert browser(world.carol).get(path).status_code == 200
    assert browser(world.admin).get(path).status_code == 200
    assert browser(world.alice).get(path).status_code == 403
    assert browser(world.bob).get(path).status_code == 403


@pytest.mark.parametrize("page", DEPARTMENT_PAGES)
def test_department_pages_answer_by_tenancy(world, page):
    vision, nlp = page.format(slug="vision"), page.format(slug="nlp")
    assert browser(world.carol).get(vision).status_code == 200
    assert browser(world.carol).get(nlp).status_code == 404  # not hers: not even its existence
    assert browser(world.alice).get(vision).status_code == 403  # her department, but she is no admin
    assert browser(world.bob).get(vision).status_code == 404
    assert browser(world.admin).get(nlp).status_code == 200
    assert browser(world.admin).get(page.format(slug="no-such")).status_code == 404


def test_the_overview_lists_only_the_departments_one_manages(world):
    carol = text(browser(world.carol).get("/console/"))
    assert "Computer Vision" in carol and "Natural Language Processing" not in carol
    admin = text(browser(world.admin).get("/console/"))
    assert "Computer Vision" in admin and "Natural Language Processing" in admin


def test_the_navigation_links_the_console_for_admins_only(world):
    assert "Admin console" in text(browser(world.carol).get("/console/"))
    assert "Admin console" in text(browser(world.admin).get("/console/"))
    assert "Admin console" not in text(browser(world.alice).get("/"))
    assert "Admin console" not in text(browser(world.bob).get("/"))


# --- Members and roles ----------------------------------------------------------------------


def test_a_dept_admin_adds_a_member_changes_the_role_and_removes_them(world):
    carol = browser(world.carol)
    added = carol.post("/console/departments/vision/members/", {"username": "bob", "role": "member"}, follow=True)
    assert "bob is now Member of vision." in text(added)
    membership = Membership.objects.get(user=world.bob, department__slug="vision")
    assert membership.role == "member"
    promoted = carol.post(
        f"/console/departments/vision/members/{membership.pk}/role/",
        {f"m{membership.pk}-role": "dept_admin"},
        follow=True,
    )
    assert "bob is now Department admin." in text(promoted)
    assert Membership.objects.get(pk=membership.pk).role == "dept_admin"
    removed = carol.post(f"/console/departments/vision/members/{membership.pk}/remove/", follow=True)
    assert "bob was removed from vision." in text(removed)
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert audit_actions(department__slug="vision") == [
        ("membership.add", "bob"),
        ("membership.role", "bob"),
        ("membership.remove", "bob"),
    ]
    assert Membership.objects.get(user=world.bob, department__slug="nlp").role == "member"


def test_it_says_when_there_is_no_such_user(world):
    response = browser(world.carol).post(
        "/console/departments/vision/members/", {"username": "mallory", "role": "member"}
    )
    assert response.status_code == 400
    assert "No active user is called &#x27;mallory&#x27;." in text(response)
    assert not AuditEvent.objects.exists()


def test_the_last_dept_admin_cannot_demote_or_remove_themselves(world):
    carol = browser(world.carol)
    mine = Membership.objects.get(user=world.carol, department__slug="vision")
    demoted = carol.post(
        f"/console/departments/vision/members/{mine.pk}/role/", {f"m{mine.pk}-role": "member"}, follow=True
    )
    assert "carol is the last department admin of vision; make someone else admin first." in text(demoted)
    removed = carol.post(f"/console/departments/vision/members/{mine.pk}/remove/", follow=True)
    assert "carol is the last department admin of vision" in text(removed)
    assert Membership.objects.get(pk=mine.pk).role == "dept_admin"
    assert not AuditEvent.objects.exists()
    alice = Membership.objects.get(user=world.alice, department__slug="vision")
    carol.post(f"/console/departments/vision/members/{alice.pk}/role/", {f"m{alice.pk}-role": "dept_admin"})
    gone = carol.post(f"/console/departments/vision/members/{mine.pk}/remove/")
    assert not Membership.objects.filter(pk=mine.pk).exists()  # alice is admin now, so carol may go
    assert gone["Location"] == "/"  # the department's console is no longer hers
    assert carol.get("/console/departments/vision/members/").status_code == 404


def test_a_dept_admin_cannot_touch_another_departments_members(world):
    bob = Membership.objects.get(user=world.bob, department__slug="nlp")
    carol = browser(world.carol)
    assert carol.post("/console/departments/nlp/members/", {"username": "alice", "role": "member"}).status_code == 404
    assert carol.post(f"/console/departments/nlp/members/{bob.pk}/remove/").status_code == 404
    # An nlp membership reached through vision's address is not found either.
    assert carol.post(f"/console/departments/vision/members/{bob.pk}/remove/").status_code == 404
    assert browser(world.alice).post(f"/console/departments/vision/members/{bob.pk}/remove/").status_code == 403
    assert Membership.objects.filter(pk=bob.pk).exists()
    assert not AuditEvent.objects.exists()


def test_a_platform_admin_may_remove_the_last_dept_admin(world):
    mine = Membership.objects.get(user=world.carol, department__slug="vision")
    browser(world.admin).post(f"/console/departments/vision/members/{mine.pk}/remove/")
    assert not Membership.objects.filter(pk=mine.pk).exists()
