"""Asking before submitting (POST /api/v1/jobs/preview/, jobs.preview): would the job start now, why not, when,
and which valid changes start it sooner; the same refusals as a submission; nothing written."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import AuditEvent
from clusters.models import Cluster, GpuPool
from jobs import admission
from jobs.models import Job, JobEvent
from quotas.models import Quota
from tests.frontend.researcher_helpers import form_as_browser_sends_it, signed_in

MINIMAL = {
    "name": "digits",
    "department": "vision",
    "code_url": "https://git.example.com/team/repo.git",
    "command": "python train.py",
}
PREVIEW = "/api/v1/jobs/preview/"


def submit(world, user, **fields):
    response = world.api(user).post("/api/v1/jobs/", {**MINIMAL, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def preview(world, user, **fields):
    return world.api(user).post(PREVIEW, {**MINIMAL, **fields}, format="json")


def written() -> tuple[int, int, int, list]:
    """What a preview must never change: jobs, their events, the audit trail, and every job's scheduling columns."""
    columns = list(
        Job.objects.order_by("pk").values_list("pk", "status", "pending_reason", "queue_position", "estimated_start")
    )
    audit = AuditEvent.objects.exclude(action__startswith="token")  # each test client signs in with a new token
    return Job.objects.count(), JobEvent.objects.count(), audit.count(), columns


def at(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


@pytest.fixture
def frag(world):
    """A second pool of vision's: two nodes of 4 GPUs, so that a gang can find enough GPUs but not enough per node."""
    pool = GpuPool.objects.create(cluster=Cluster.objects.get(name="local"), gpu_type="frag", nodes=2, gpus_per_node=4)
    Quota.objects.create(department=world.alice.memberships.get().department, pool=pool, nominal=8)
    return pool


@pytest.mark.parametrize(
    ("setup", "fields", "expected"),
    [
        pytest.param([], {"gpus_per_worker": 1}, {"would_start": True, "pending_reason": ""}, id="fits now"),
        pytest.param(
            [("alice", {"gpus_per_worker": 4, "priority": "high"})],
            {"gpus_per_worker": 2, "priority": "high"},
            {"would_start": False, "pending_reason": "quota_exhausted", "alternatives": []},
            id="quota used up, no smaller job helps",
        ),
        pytest.param(
            [("bob", {"department": "nlp", "gpus_per_worker": 4}), ("alice", {"gpus_per_worker": 2})],
            {"gpus_per_worker": 4},
            {
                "would_start": False,
                "pending_reason": "quota_exhausted",
                "alternatives": [{"gpus_per_worker": 2}, {"gpus_per_worker": 1}],
            },
            id="not enough idle GPUs to borrow, fewer GPUs per worker start now",
        ),
    ],
)
def test_a_preview_says_what_the_scheduler_would_do_and_writes_nothing(world, setup, fields, expected):
    users = {"alice": world.alice, "bob": world.bob}
    for user, body in setup:
        submit(world, users[user], **body)
    before = written()
    asked = timezone.now()

    response = preview(world, world.alice, **fields)

    assert response.status_code == 200, response.json()
    answer = response.json()
    assert set(answer) == {
        "would_start",
        "pending_reason",
        "status_message",
        "queue_position",
        "estimated_start",
        "latest_start",
        "alternatives",
    }
    assert answer["would_start"] == expected["would_start"]
    assert answer["pending_reason"] == expected["pending_reason"]
    if answer["would_start"]:
        assert answer["queue_position"] is None and abs(at(answer["estimated_start"]) - asked) < timedelta(minutes=1)
    else:
        assert answer["status_message"] and answer["queue_position"] == 1
        # Not before the running job's limit frees the GPUs (of the pool, or of vision's quota): days, not "now".
        assert at(answer["estimated_start"]) > asked + timedelta(days=6)
    if "alternatives" in expected:
        assert [a["change"] for a in answer["alternatives"]] == expected["alternatives"]
        for alternative in answer["alternatives"]:
            assert at(alternative["estimated_start"]) < at(answer["estimated_start"])
    assert written() == before


def test_a_gang_that_does_not_fit_on_the_nodes_is_offered_smaller_workers_and_one_worker(world, frag):
    for _ in range(2):
        # binpack: node 0 keeps 2 free, node 1 has 4; not preemptible, so nothing is moved to make room
        submit(world, world.alice, gpu_type="frag", gpus_per_worker=1, priority="high")
    before = written()

    answer = preview(world, world.alice, gpu_type="frag", workers=2, gpus_per_worker=3).json()

    assert answer["would_start"] is False
    assert answer["pending_reason"] == "gang_does_not_fit", answer
    changes = [a["change"] for a in answer["alternatives"]]
    assert {"gpus_per_worker": 1} in changes and {"workers": 1} in changes
    assert {"cluster": "local", "gpu_type": "sim"} in changes  # vision's other pool is idle
    assert written() == before


def test_an_alternative_in_another_pool_is_offered_where_the_department_has_quota(world, frag):
    submit(world, world.alice, gpu_type="frag", gpus_per_worker=4, workers=2, priority="high")
    answer = preview(world, world.alice, gpu_type="frag", gpus_per_worker=4, priority="high").json()
    assert answer["pending_reason"] == "quota_exhausted"
    changes = [a["change"] for a in answer["alternatives"]]
    assert changes == [{"cluster": "local", "gpu_type": "sim"}]  # fewer GPUs do not help: vision's frag is used up


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"department": "nlp"}, id="another department"),
        pytest.param({"cluster": "elsewhere"}, id="no such cluster"),
        pytest.param({"gpu_type": "h100"}, id="a pool the department has no quota for"),
        pytest.param({"name": "Bad_Name", "workers": "many", "gpus_per_worker": 3.5}, id="bad fields"),
        pytest.param({"workers": 3, "gpus_per_worker": 4}, id="larger than the pool"),
    ],
)
def test_a_preview_refuses_what_a_submission_refuses_with_the_same_answer(world, fields):
    before = written()
    previewed = preview(world, world.alice, **fields)
    assert written() == before
    submitted = world.api(world.alice).post("/api/v1/jobs/", {**MINIMAL, **fields}, format="json")
    assert previewed.status_code == submitted.status_code == 400
    assert previewed.json() == submitted.json()


def test_a_preview_needs_a_signed_in_member(world):
    assert world.api().post(PREVIEW, MINIMAL, format="json").status_code in (401, 403)
    assert preview(world, world.bob).status_code == 400  # bob is in nlp, not vision: the submission's refusal
    assert preview(world, world.bob).json()["department"] == ["You are not a member of a department called 'vision'."]


def test_a_preview_queues_behind_the_jobs_already_waiting_and_leaves_them_alone(world):
    submit(world, world.alice, gpus_per_worker=4, priority="high")  # vision's nominal, admitted
    waiting = submit(world, world.alice, gpus_per_worker=2, priority="high")
    assert waiting["pending_reason"] == "quota_exhausted" and waiting["queue_position"] == 1
    before = written()

    answer = preview(world, world.alice, gpus_per_worker=2, priority="high").json()

    assert (answer["would_start"], answer["pending_reason"], answer["queue_position"]) == (
        False,
        "lower_in_queue",
        2,
    )
    assert at(answer["estimated_start"]) >= at(Job.objects.get(pk=waiting["id"]).estimated_start.isoformat())
    assert written() == before


# --- The submit form's live preview (frontend.views.job_new_preview) -------------------------------------------


def form_preview(client, **fields) -> str:
    data = form_as_browser_sends_it(client.get("/jobs/new/")) | {key: str(value) for key, value in fields.items()}
    response = client.post("/jobs/new/preview/", data)
    assert response.status_code == 200
    return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())


def test_the_form_says_in_words_whether_the_job_would_start_while_it_is_filled_in(client, world):
    signed_in(client, world.alice)
    before = written()
    assert "Would start now" in form_preview(client)  # no name, code or command yet: they do not decide a start

    submit(world, world.alice, gpus_per_worker=4, priority="high")
    words = form_preview(client, gpus_per_worker=8, priority="high")
    # 8 GPUs of work that cannot be preempted never fit in vision's nominal 4; 4 fit once the running job ends.
    assert "Would wait: Quota used up ; no estimate of when (number 1 in the queue)" in words
    assert "Starts sooner with 4 GPUs per worker: about " in words and ": now" not in words

    bob_uses_his = world.api(world.bob)
    assert bob_uses_his.post("/api/v1/jobs/", {**MINIMAL, "department": "nlp", "gpus_per_worker": 2}).status_code == 201
    words = form_preview(client, gpus_per_worker=4)  # normal priority borrows: 2 idle GPUs, not 4
    assert "Would wait: Quota used up" in words
    assert "Starts sooner with 2 GPUs per worker: now" in words and "Starts sooner with 1 GPU per worker: now" in words
    assert Job.objects.count() == before[0] + 2  # the two submissions above, nothing from the previews


def test_the_form_preview_names_the_fields_that_keep_it_from_an_answer(client, world):
    signed_in(client, world.alice)
    words = form_preview(client, gpus_per_worker=3.5, workers=0)
    assert "Fix these to see when the job would start:" in words
    assert "Workers: Use between 1 and 64 workers." in words
    assert "GPUs per worker: Above 1, ask for a whole number of GPUs per worker." in words


def test_the_form_preview_needs_its_csrf_token_and_a_sign_in(world):
    anonymous = Client()
    assert anonymous.post("/jobs/new/preview/", {"department": "vision"}).status_code == 302  # to the sign-in page
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(world.alice)
    assert strict.post("/jobs/new/preview/", {"department": "vision"}).status_code == 403


def test_a_preview_only_reads_and_takes_no_lock_so_submissions_never_wait_for_it(world, monkeypatch):
    submit(world, world.bob, department="nlp", gpus_per_worker=4)
    client = world.api(world.alice)

    def no_lock():
        raise AssertionError("a preview took the scheduling cycle's lock")

    monkeypatch.setattr(admission, "_lock_cycle", no_lock)
    with CaptureQueriesContext(connection) as queries:
        response = client.post(PREVIEW, {**MINIMAL, "gpus_per_worker": 8}, format="json")
    assert response.status_code == 200, response.json()
    # Token authentication stamps the token's last use; nothing else is written, nothing locked.
    writes = [q["sql"] for q in queries.captured_queries if not q["sql"].lstrip().upper().startswith("SELECT")]
    assert all("_apitoken" in sql for sql in writes), writes
    assert not any("FOR UPDATE" in query["sql"].upper() for query in queries.captured_queries)
