"""The department admin console: who gets in, and what each section shows and changes."""

import re

import pytest
from django.test import Client

from accounts.models import AuditEvent, Membership
from clusters.models import GpuPool, Storage
from jobs.models import Job
from quotas.models import PriorityClass, Quota

JOB = {"name": "q", "code_url": "https://git.example.com/r.git", "command": "python train.py"}

DEPARTMENT_PAGES = [
    "/console/departments/{slug}/members/",
    "/console/departments/{slug}/quotas/",
    "/console/departments/{slug}/storage/",
]
GLOBAL_PAGES = ["/console/", "/console/priorities/", "/console/usage/", "/console/audit/"]


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submit(world, user, department="vision", **fields) -> dict:
    response = world.api(user).post("/api/v1/jobs/", {**JOB, "department": department, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def text(response) -> str:
    return response.content.decode()


def audit_actions(**filters) -> list[tuple[str, str]]:
    return list(AuditEvent.objects.filter(**filters).order_by("id").values_list("action", "target"))


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


# --- Quotas -----------------------------------------------------------------------------------


def quota_form(pool, nominal, borrowing="", lending="", action="preview") -> dict:
    return {
        f"pool{pool.pk}-nominal": nominal,
        f"pool{pool.pk}-borrowing_limit": borrowing,
        f"pool{pool.pk}-lending_limit": lending,
        "action": action,
    }


def test_dept_admins_read_quotas_and_cannot_change_them(world):
    page = browser(world.carol).get("/console/departments/vision/quotas/")
    assert "Quotas and live usage" in text(page) and "Preview the change" not in text(page)
    pool = GpuPool.objects.get(gpu_type="sim")
    assert (
        browser(world.carol).post("/console/departments/vision/quotas/", quota_form(pool, 6, action="save")).status_code
        == 403
    )
    assert Quota.objects.get(department__slug="vision").nominal == 4


def test_a_platform_admin_previews_the_affected_jobs_then_saves(world):
    Quota.objects.filter(department__slug="nlp").update(lending_limit=0)
    submit(world, world.alice, gpus_per_worker=4)
    waiting = submit(world, world.alice, name="wants-more", gpus_per_worker=2)
    Quota.objects.filter(department__slug="nlp").update(nominal=2)
    pool = GpuPool.objects.get(gpu_type="sim")
    admin = browser(world.admin)
    assert "Preview the change" in text(admin.get("/console/departments/vision/quotas/"))
    preview = admin.post("/console/departments/vision/quotas/", quota_form(pool, 6))
    assert preview.status_code == 200
    html = text(preview)
    admitted = re.search(r'<ul class="jobs admitted">(.*?)</ul>', html, re.S)
    assert admitted and f"#{waiting['id']} <strong>wants-more</strong> (vision)" in admitted.group(1)
    assert "Save these quotas" in html
    assert Quota.objects.get(department__slug="vision").nominal == 4  # a preview changes nothing
    assert Job.objects.get(pk=waiting["id"]).status == "queued"
    saved = admin.post("/console/departments/vision/quotas/", quota_form(pool, 6, action="save"), follow=True)
    assert "Quotas of vision saved." in text(saved)
    assert Quota.objects.get(department__slug="vision").nominal == 6
    assert Job.objects.get(pk=waiting["id"]).status == "admitted"
    event = AuditEvent.objects.get(action="quota.set")
    assert (event.actor, event.department.slug, event.data["after"][0]["nominal"]) == (world.admin, "vision", 6)


def test_a_preview_names_the_running_jobs_a_larger_guarantee_would_preempt(world):
    Quota.objects.filter(department__slug="nlp").update(nominal=2)
    big = submit(world, world.alice, name="big", gpus_per_worker=6)  # 4 of vision's own and 2 borrowed
    waiting = submit(world, world.bob, department="nlp", name="needs-four", gpus_per_worker=4)
    assert (big["status"], waiting["status"]) == ("admitted", "queued")
    pool = GpuPool.objects.get(gpu_type="sim")
    html = text(browser(world.admin).post("/console/departments/nlp/quotas/", quota_form(pool, 4)))
    preempted = re.search(r'<ul class="jobs preempted">(.*?)</ul>', html, re.S)
    assert preempted and f"#{big['id']} <strong>big</strong> (vision)" in preempted.group(1)
    assert "borrows GPUs that nlp&#x27;s nominal guarantees" in preempted.group(1)
    still_waiting = re.search(r'<ul class="jobs waiting">(.*?)</ul>', html, re.S)
    assert still_waiting and f"#{waiting['id']} <strong>needs-four</strong> (nlp)" in still_waiting.group(1)
    assert Job.objects.get(pk=big["id"]).preempt_requested_at is None  # only a preview


def test_the_quota_form_shows_what_is_wrong_beside_the_pool(world):
    pool = GpuPool.objects.get(gpu_type="sim")
    admin = browser(world.admin)
    too_much = admin.post("/console/departments/vision/quotas/", quota_form(pool, 7))
    assert too_much.status_code == 400
    assert "at most 4 can be nominal here" in text(too_much)
    limits_only = admin.post("/console/departments/vision/quotas/", quota_form(pool, "", lending="1"))
    assert "Set a nominal quota, or leave the limits empty." in text(limits_only)
    admin.post("/console/departments/vision/quotas/", quota_form(pool, 7, action="save"))
    assert Quota.objects.get(department__slug="vision").nominal == 4
    assert not AuditEvent.objects.exists()


def test_a_preview_says_when_nothing_waits(world):
    pool = GpuPool.objects.get(gpu_type="sim")
    html = text(browser(world.admin).post("/console/departments/vision/quotas/", quota_form(pool, 3)))
    assert "Waiting jobs that would be admitted" in html and "None." in html


# --- Priority classes -------------------------------------------------------------------------


def test_dept_admins_read_priority_classes_only(world):
    page = text(browser(world.carol).get("/console/priorities/"))
    assert "<code>high</code>" in page and "New priority class" not in page and "Edit high" not in page
    carol = browser(world.carol)
    assert carol.post("/console/priorities/", {"name": "urgent", "value": 2000}).status_code == 403
    assert carol.get("/console/priorities/high/").status_code == 403
    assert carol.post("/console/priorities/high/", {"value": 1}).status_code == 403
    assert browser(world.alice).get("/console/priorities/high/").status_code == 403
    assert PriorityClass.objects.get(name="high").value == 1000
    assert not PriorityClass.objects.filter(name="urgent").exists()


def test_a_platform_admin_creates_and_edits_priority_classes(world):
    admin = browser(world.admin)
    created = admin.post(
        "/console/priorities/", {"name": "urgent", "value": 2000, "description": "Deadlines"}, follow=True
    )
    assert "Priority class urgent created." in text(created)
    urgent = PriorityClass.objects.get(name="urgent")
    assert (urgent.value, urgent.preemptible, urgent.description) == (2000, False, "Deadlines")
    assert admin.get("/console/priorities/urgent/").status_code == 200
    edited = admin.post("/console/priorities/urgent/", {"value": 1500, "preemptible": "on"}, follow=True)
    assert "Priority class urgent saved." in text(edited)
    urgent.refresh_from_db()
    assert (urgent.value, urgent.preemptible) == (1500, True)
    assert audit_actions() == [("priority_class.create", "urgent"), ("priority_class.update", "urgent")]
    again = admin.post("/console/priorities/", {"name": "urgent", "value": 1})
    assert again.status_code == 400 and "There is already a priority class called &#x27;urgent&#x27;." in text(again)
    assert admin.get("/console/priorities/no-such/").status_code == 404


# --- Storage ------------------------------------------------------------------------------------


def test_a_dept_admin_creates_edits_and_deletes_storage(world, tmp_path):
    carol = browser(world.carol)
    (tmp_path / "scratch").mkdir()
    created = carol.post(
        "/console/departments/vision/storage/",
        {"name": "vision-scratch", "kind": "local", "local_path": f"{tmp_path}/scratch", "description": "Scratch"},
        follow=True,
    )
    assert "Storage vision-scratch created." in text(created)
    volume = Storage.objects.get(department__slug="vision", name="vision-scratch")
    assert (volume.kind, volume.local_path) == ("local", f"{tmp_path}/scratch")
    assert carol.get(f"/console/departments/vision/storage/{volume.pk}/").status_code == 200
    carol.post(
        f"/console/departments/vision/storage/{volume.pk}/",
        {"kind": "pvc", "pvc_name": "scratch-claim", "local_path": "/ignored"},
    )
    volume.refresh_from_db()
    assert (volume.kind, volume.pvc_name, volume.local_path) == ("pvc", "scratch-claim", "")
    assert "Delete storage volume vision-scratch?" in text(
        carol.get(f"/console/departments/vision/storage/{volume.pk}/delete/")
    )
    deleted = carol.post(f"/console/departments/vision/storage/{volume.pk}/delete/", follow=True)
    assert "Storage vision-scratch deleted." in text(deleted)
    assert not Storage.objects.filter(pk=volume.pk).exists()
    assert audit_actions(department__slug="vision") == [
        ("storage.create", "vision-scratch"),
        ("storage.update", "vision-scratch"),
        ("storage.delete", "vision-scratch"),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"name": "scratch", "kind": "local", "local_path": "data/scratch"},
            "Give an absolute path without &#x27;..&#x27;",
        ),
        (
            {"name": "scratch", "kind": "local", "local_path": "/data/../etc"},
            "Give an absolute path without &#x27;..&#x27;",
        ),
        ({"name": "scratch", "kind": "local", "local_path": ""}, "Local storage needs the absolute path"),
        ({"name": "scratch", "kind": "pvc", "pvc_name": "Bad_Claim"}, "Give the PersistentVolumeClaim&#x27;s name"),
        (
            {"name": "Not A Name", "kind": "pvc", "pvc_name": "claim"},
            "Use lower-case letters, digits and &#x27;-&#x27;",
        ),
        ({"name": "vision-datasets", "kind": "pvc", "pvc_name": "claim"}, "already exists"),
        ({"name": "scratch", "kind": "local", "local_path": "/etc"}, "/etc is a system directory"),
    ],
)
def test_storage_is_validated_as_the_model_expects(world, data, message):
    response = browser(world.carol).post("/console/departments/vision/storage/", data)
    assert response.status_code == 400
    assert message in text(response)
    assert Storage.objects.filter(department__slug="vision").count() == 1
    assert not AuditEvent.objects.filter(action__startswith="storage.").exists()


def test_storage_that_an_unfinished_job_mounts_is_not_deleted(world):
    job = submit(world, world.alice, mounts=[{"storage": "vision-datasets", "path": "/data", "read_only": True}])
    volume = Storage.objects.get(name="vision-datasets")
    response = browser(world.carol).post(f"/console/departments/vision/storage/{volume.pk}/delete/")
    assert response.status_code == 409
    assert f"Jobs {job['id']} mount vision-datasets and have not finished" in text(response)
    assert Storage.objects.filter(pk=volume.pk).exists()


def test_storage_of_another_department_is_not_found(world):
    theirs = Storage.objects.get(name="nlp-corpora")
    carol = browser(world.carol)
    assert carol.get(f"/console/departments/vision/storage/{theirs.pk}/").status_code == 404
    assert carol.post(f"/console/departments/vision/storage/{theirs.pk}/delete/").status_code == 404
    assert carol.post(f"/console/departments/nlp/storage/{theirs.pk}/delete/").status_code == 404
    assert browser(world.admin).get(f"/console/departments/nlp/storage/{theirs.pk}/").status_code == 200
    assert Storage.objects.filter(pk=theirs.pk).exists()


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
