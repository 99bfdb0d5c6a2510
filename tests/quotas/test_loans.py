"""Time-bound quota loans (POST/GET /api/v1/quota-loans/, DELETE .../<id>/; quotas.services.loan_*): who may
lend, see and end them, the refusals a person can act on, never lending more than the lender has (also when
admins lend at once), the quotas they move while active, and the GPUs going back at expiry with an injected
clock: the lender's waiting job reclaims them, the borrower keeps what its own nominal covers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections
from django.test import Client
from django.utils import timezone

from accounts.models import AuditEvent, Department, Membership
from clusters.models import GpuPool
from core.errors import InvalidInput
from jobs.models import Job
from quotas import selectors, services, tasks
from quotas.models import Quota, QuotaLoan
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

LOANS = "/api/v1/quota-loans/"
JOB = {"name": "train", "code_url": "https://git.example.com/team/repo.git", "command": "python train.py"}


def later(**delta) -> str:
    return (timezone.now() + timedelta(**delta)).isoformat()


def body(**fields) -> dict:
    return {
        "from_department": "vision",
        "to_department": "nlp",
        "cluster": "local",
        "gpu_type": "sim",
        "gpus": 2,
        "until": later(hours=2),
        **fields,
    }


@pytest.fixture
def dave(world):
    """An admin of a third department, robotics, which has no quota on local/sim: an outsider to vision and nlp."""
    robotics = Department.objects.create(slug="robotics", name="Robotics")
    user = get_user_model().objects.create_user("dave", password=PASSWORD)
    Membership.objects.create(user=user, department=robotics, role=Membership.Role.DEPT_ADMIN)
    return user


def lend(world, user=None, **fields):
    return world.api(user or world.carol).post(LOANS, body(**fields), format="json")


def submit(world, user, department: str, gpus: int, priority: str = "normal") -> Job:
    data = {**JOB, "department": department, "gpus_per_worker": gpus, "priority": priority}
    response = world.api(user).post("/api/v1/jobs/", data, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def nominal(slug: str, now: datetime | None = None) -> int:
    [quota] = selectors.effective_quotas(Quota.objects.filter(department__slug=slug, pool__gpu_type="sim"), now=now)
    return quota.nominal


# --- Creating ---------------------------------------------------------------------------


def test_a_dept_admin_lends_gpus_and_both_departments_see_it_in_the_audit_log(world):
    response = lend(world)
    assert response.status_code == 201, response.json()
    loan = response.json()
    assert loan["from_department"] == "vision" and loan["to_department"] == "nlp"
    assert (loan["cluster"], loan["gpu_type"], loan["gpus"]) == ("local", "sim", 2)
    assert loan["active"] is True and loan["ended_at"] is None and loan["created_by"] == "carol"
    audited = AuditEvent.objects.filter(action="loan.create", target=str(loan["id"]))
    assert sorted(audited.values_list("department__slug", flat=True)) == ["nlp", "vision"]
    assert (nominal("vision"), nominal("nlp")) == (2, 6)


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        pytest.param({"gpus": 0}, "gpus", "greater than or equal to 1", id="no GPUs"),
        pytest.param(
            {"gpus": 5},
            "gpus",
            "nominal quota of 4 GPUs on local/sim and already lends 0: at most 4",
            id="more than nominal",
        ),
        pytest.param({"until": later(minutes=-1)}, "until", "pick a time in the future", id="until in the past"),
        pytest.param({"until": later(days=91)}, "until", "at most 90 days", id="too long"),
        pytest.param({"until": "next friday"}, "until", "Datetime has wrong format", id="not a time"),
        pytest.param({"to_department": "vision"}, "to_department", "cannot lend to itself", id="to itself"),
        pytest.param({"to_department": "nosuch"}, "to_department", "No department called 'nosuch'", id="no borrower"),
        pytest.param(
            {"to_department": "robotics"},
            "to_department",
            "robotics has no quota on local/sim",
            id="borrower without quota",
        ),
        pytest.param({"cluster": "nosuch"}, "cluster", "No cluster named 'nosuch'", id="no cluster"),
        pytest.param({"gpu_type": "H100"}, "gpu_type", "has no 'H100' GPUs; it has: sim", id="no pool"),
        pytest.param(
            {"from_department": "nlp"},
            "from_department",
            "not a member of a department called 'nlp'",
            id="not the lender's",
        ),
        pytest.param({"gpus_count": 2}, "gpus_count", "Unknown field", id="unknown field"),
    ],
)
def test_a_bad_loan_is_refused_with_a_message_on_its_field(world, dave, fields, field, words):
    response = lend(world, **fields)
    assert response.status_code == 400, response.json()
    problems = " ".join(map(str, response.json()[field]))
    assert words in problems, response.json()
    assert not QuotaLoan.objects.exists()


def test_a_lender_without_quota_on_the_pool_has_nothing_to_lend(world, dave):
    pool = GpuPool.objects.get(gpu_type="sim")
    Quota.objects.create(department=Department.objects.get(slug="robotics"), pool=pool, nominal=0)
    response = lend(world, dave, from_department="robotics", to_department="nlp")
    assert response.status_code == 400
    assert "at most 0 can be lent" in response.json()["gpus"][0]


def test_lending_again_counts_what_is_already_lent(world):
    assert lend(world, gpus=3).status_code == 201
    response = lend(world, gpus=2)
    assert response.status_code == 400
    assert "already lends 3: at most 1 can be lent" in response.json()["gpus"][0]
    assert lend(world, gpus=1).status_code == 201
    assert (nominal("vision"), nominal("nlp")) == (0, 8)


def test_a_member_may_not_lend_and_a_platform_admin_may(world):
    assert lend(world, world.alice).status_code == 403
    assert lend(world, world.admin).status_code == 201


def test_a_lender_keeps_its_nominal_at_least_what_it_lends(world):
    lend(world, gpus=3)
    with pytest.raises(InvalidInput) as refused:
        services.quota_set(
            actor=world.admin,
            department=Department.objects.get(slug="vision"),
            quotas=[{"cluster": "local", "gpu_type": "sim", "nominal": 2}],
        )
    assert "lends 3 GPUs of local/sim right now" in str(refused.value.errors["quotas"][0]["nominal"])


@pytest.mark.django_db(transaction=True)
def test_admins_lending_at_once_never_lend_more_than_the_nominal(world):
    """8 loans of 1 GPU at once out of a nominal of 4: exactly 4 are made. The pool row is locked before the
    GPUs already lent are counted (PostgreSQL: SELECT ... FOR UPDATE; SQLite: one writer at a time)."""
    vision = Department.objects.get(slug="vision")
    until = timezone.now() + timedelta(hours=1)

    def attempt(_):
        try:
            services.loan_create(
                actor=world.carol,
                from_department=vision,
                to_department="nlp",
                cluster="local",
                gpu_type="sim",
                gpus=1,
                until=until,
            )
            return "lent"
        except InvalidInput as exc:
            assert "at most 0 can be lent" in str(exc.errors["gpus"])
            return "refused"
        finally:
            connections.close_all()

    threads = 8 if connection.vendor == "postgresql" else 4
    with ThreadPoolExecutor(max_workers=threads) as pool:
        outcomes = list(pool.map(attempt, range(8)))
    assert sorted(outcomes) == ["lent"] * 4 + ["refused"] * 4
    assert QuotaLoan.objects.count() == 4
    assert (nominal("vision"), nominal("nlp")) == (0, 8)


# --- Who sees and ends them ------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "sees", "delete"),
    [
        pytest.param("alice", True, 403, id="lender's member"),
        pytest.param("carol", True, 200, id="lender's admin"),
        pytest.param("bob", True, 403, id="borrower's member"),
        pytest.param("dave", False, 404, id="another department's admin"),
        pytest.param("admin", True, 200, id="platform admin"),
        pytest.param(None, None, 401, id="anonymous"),
    ],
)
def test_each_role_sees_and_ends_exactly_the_loans_that_concern_it(world, dave, who, sees, delete):
    loan_id = lend(world).json()["id"]
    user = {"alice": world.alice, "carol": world.carol, "bob": world.bob, "dave": dave, "admin": world.admin}.get(
        who or ""
    )
    client = world.api(user)
    listed = client.get(LOANS)
    detail = client.get(f"{LOANS}{loan_id}/")
    if sees is None:
        assert (listed.status_code, detail.status_code) == (401, 401)
    else:
        assert [item["id"] for item in listed.json()["results"]] == ([loan_id] if sees else [])
        assert detail.status_code == (200 if sees else 404)
    ended = client.delete(f"{LOANS}{loan_id}/")
    assert ended.status_code == delete, ended.content
    if delete == 200:
        assert ended.json()["active"] is False and ended.json()["end_reason"] == "ended"
        assert AuditEvent.objects.filter(action="loan.end", target=str(loan_id)).count() == 2
        assert client.delete(f"{LOANS}{loan_id}/").status_code == 409  # once
    else:
        assert QuotaLoan.objects.get(pk=loan_id).ended_at is None


def test_the_console_loan_pages_are_for_the_lenders_admins(world, dave):
    loan_id = lend(world).json()["id"]
    for user, page, status in [
        (world.alice, "/console/departments/vision/loans/", 403),
        (world.carol, "/console/departments/vision/loans/", 200),
        (dave, "/console/departments/vision/loans/", 404),
        (world.carol, f"/console/departments/vision/loans/{loan_id}/end/", 200),
        (dave, f"/console/departments/robotics/loans/{loan_id}/end/", 404),  # not lent by robotics
    ]:
        client = Client()
        client.force_login(user)
        assert client.get(page).status_code == status, (user, page)


# --- What they change ------------------------------------------------------------------


def test_a_loan_admits_the_borrowers_waiting_job_and_its_end_takes_the_gpus_back(world):
    """nlp may not borrow idle GPUs (borrowing limit 0): its second job waits until vision lends it 2 GPUs; at
    expiry vision's waiting 4-GPU job reclaims them from that job, and nlp's job within its own 4 runs on."""
    Quota.objects.filter(department__slug="nlp").update(borrowing_limit=0)
    own = submit(world, world.bob, "nlp", 4)
    on_loan = submit(world, world.bob, "nlp", 2)
    assert (own.status, on_loan.status, on_loan.pending_reason) == ("admitted", "queued", "borrowing_limit")

    until = timezone.now() + timedelta(hours=1)
    created = lend(world, gpus=2, until=until.isoformat())
    assert created.status_code == 201
    on_loan.refresh_from_db()
    assert on_loan.status == "admitted"  # the loan's capacity_changed ran a cycle
    vision_job = submit(world, world.alice, "vision", 4)
    assert vision_job.status == "queued"  # its nominal is 2 while it lends 2, and only 2 GPUs are idle

    # Nothing happens before the loan is due.
    assert services.loans_expire(now=until - timedelta(seconds=1)) == []
    assert Job.objects.filter(preempt_requested_at__isnull=False).count() == 0
    expired = services.loans_expire(now=until + timedelta(seconds=1))
    assert [loan.pk for loan in expired] == [created.json()["id"]]
    assert AuditEvent.objects.filter(action="loan.expire").count() == 2
    assert QuotaLoan.objects.get().end_reason == "expired"
    assert (nominal("vision"), nominal("nlp")) == (4, 4)

    # The expiry ran a cycle: the loaned GPUs are reclaimed (SIGTERM and the grace period), nothing else.
    vision_job.refresh_from_db()
    assert vision_job.pending_reason == "preemption_in_progress"
    stopping = list(Job.objects.filter(preempt_requested_at__isnull=False).values_list("pk", "preempt_reason"))
    assert stopping == [(on_loan.pk, "reclaim")]
    assert Job.objects.get(pk=own.pk).status == "admitted"  # nlp's guarantee: within its own nominal
    assert services.loans_expire(now=until + timedelta(seconds=2)) == []  # once


def test_ending_a_loan_early_gives_the_gpus_back_at_once(world):
    Quota.objects.filter(department__slug="nlp").update(borrowing_limit=0)
    loan_id = lend(world, gpus=4).json()["id"]
    on_loan = submit(world, world.bob, "nlp", 8)
    assert on_loan.status == "admitted"
    vision_job = submit(world, world.alice, "vision", 2)
    assert vision_job.status == "queued"
    assert world.api(world.carol).delete(f"{LOANS}{loan_id}/").status_code == 200
    on_loan.refresh_from_db()
    vision_job.refresh_from_db()
    assert on_loan.preempt_requested_at is not None and on_loan.preempt_reason == "reclaim"
    assert vision_job.pending_reason == "preemption_in_progress"


def test_quotas_follow_the_clock_even_before_the_expiry_runs(world):
    until = timezone.now() + timedelta(hours=1)
    lend(world, gpus=3, until=until.isoformat())
    assert (nominal("vision", until - timedelta(seconds=1)), nominal("nlp", until - timedelta(seconds=1))) == (1, 7)
    assert (nominal("vision", until), nominal("nlp", until)) == (4, 4)


def test_borrowed_nominal_takes_only_work_that_can_be_given_back(world):
    """A job that cannot be preempted runs within the borrower's own nominal only: at the loan's end the loaned
    GPUs must be reclaimable."""
    Quota.objects.filter(department__slug="nlp").update(borrowing_limit=0)
    lend(world, gpus=4)
    job = submit(world, world.bob, "nlp", 6, priority="high")
    job.refresh_from_db()
    assert job.status == "queued" and job.pending_reason == "quota_exhausted"
    assert "lent to it by a quota loan" in job.status_message
    assert submit(world, world.bob, "nlp", 4, priority="high").status == "admitted"


def test_usage_counts_gpus_within_a_borrowed_nominal_as_not_borrowed(world):
    Quota.objects.filter(department__slug="nlp").update(borrowing_limit=0)
    lend(world, gpus=2)
    submit(world, world.bob, "nlp", 6)
    detail = world.api(world.bob).get("/api/v1/departments/nlp/").json()
    [row] = detail["usage"]
    assert (row["nominal"], row["in_use"], row["borrowed"]) == (4, 6.0, 0.0)  # nominal: the stored one


def test_the_console_quota_bars_say_who_lends_to_whom_until_when(world):
    lend(world, gpus=2)
    client = Client()
    client.force_login(world.carol)
    page = client.get("/console/departments/vision/quotas/").content.decode()
    assert "lent 2 GPUs to nlp until" in page
    client.force_login(world.admin)
    page = client.get("/console/departments/nlp/quotas/").content.decode()
    assert "borrowed 2 GPUs from vision until" in page


def test_beat_ends_due_loans_without_a_request(world, settings):
    """expire-quota-loans runs every few seconds: a due loan ends and its GPUs go back though nobody asks."""
    entry = settings.CELERY_BEAT_SCHEDULE["expire-quota-loans"]
    assert entry["task"] == "quotas.tasks.expire_quota_loans" and entry["schedule"] <= 10
    loan_id = lend(world, gpus=2).json()["id"]
    QuotaLoan.objects.filter(pk=loan_id).update(until=timezone.now() - timedelta(seconds=1))
    tasks.expire_quota_loans()
    loan = QuotaLoan.objects.get(pk=loan_id)
    assert (loan.end_reason, loan.ended_by) == ("expired", None)
    listed = world.api(world.bob).get(LOANS).json()["results"]
    assert [(item["id"], item["active"], item["end_reason"]) for item in listed] == [(loan_id, False, "expired")]
