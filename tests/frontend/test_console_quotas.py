"""The admin console's quotas (read by dept admins, previewed and saved by platform admins) and priority classes."""

import re

from accounts.models import AuditEvent
from clusters.models import GpuPool
from jobs.models import Job
from quotas.models import PriorityClass, Quota
from tests.frontend.console_helpers import audit_actions, browser, submit, text

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
