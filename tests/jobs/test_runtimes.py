"""jobs.runtimes: a job's likely runtime from the jobs that finished before it, and the preview's range built on
it ("likely in an hour, at the latest in 7 days")."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from jobs.models import Job
from jobs.runtimes import runtimes_for
from tests.frontend.researcher_helpers import signed_in
from tests.jobs.test_preview import form_preview

MINIMAL = {
    "name": "digits",
    "department": "vision",
    "code_url": "https://git.example.com/team/repo.git",
    "command": "python train.py",
}


def submit(world, user, **fields) -> Job:
    response = world.api(user).post("/api/v1/jobs/", {**MINIMAL, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def finished(job: Job, *, hours: float, status: str = "succeeded", days_ago: float = 0) -> Job:
    """The job as if it had run ``hours`` and ended (only the columns the history reads)."""
    Job.objects.filter(pk=job.pk).update(
        status=status,
        gpu_seconds=hours * 3600 * job.gpus,
        finished_at=timezone.now() - timedelta(days=days_ago),
        placement=[],
    )
    job.refresh_from_db()
    return job


def test_the_same_code_first_then_the_same_size_and_never_past_the_limit(world, django_assert_num_queries):
    finished(submit(world, world.alice, gpus_per_worker=2), hours=1)
    finished(submit(world, world.alice, gpus_per_worker=2), hours=3)  # mean of the two: 2 h
    finished(submit(world, world.carol, command="python other.py", gpus_per_worker=4), hours=5)
    finished(submit(world, world.carol, command="python other.py", gpus_per_worker=4), hours=50, status="failed")
    finished(submit(world, world.carol, command="python old.py", gpus_per_worker=4), hours=9, days_ago=120)
    finished(submit(world, world.bob, department="nlp", command="python nlp.py", gpus_per_worker=4), hours=7)

    same_code = Job(submitted_by=world.alice, department=world.alice.memberships.get().department, **_spec(2))
    same_size = Job(submitted_by=world.alice, department=same_code.department, **_spec(4, command="python new.py"))
    short_limit = Job(submitted_by=world.alice, department=same_code.department, **_spec(2, limit=1800))
    unknown = Job(submitted_by=world.alice, department=same_code.department, **_spec(1, command="python new.py"))
    with django_assert_num_queries(1):
        history = runtimes_for([same_code, same_size, short_limit, unknown])

    assert history.of(same_code) == pytest.approx(2 * 3600)
    assert history.of(same_size) == pytest.approx(5 * 3600)  # vision's 4-GPU jobs: not the failed, not the old
    assert history.of(short_limit) == 1800
    assert history.of(unknown) is None  # nothing like it: the limit stays the only duration
    assert runtimes_for([]).of(unknown) is None


def _spec(gpus: int, *, command: str = "python train.py", limit: int = 7 * 24 * 3600) -> dict:
    return {
        "code_url": MINIMAL["code_url"],
        "command": command,
        "workers": 1,
        "gpus_per_worker": gpus,
        "max_runtime_seconds": limit,
    }


def test_a_preview_gives_the_likely_start_from_history_and_the_latest_from_the_limits(world):
    finished(submit(world, world.alice, gpus_per_worker=4, priority="high"), hours=1)
    running = submit(world, world.alice, gpus_per_worker=4, priority="high")  # all of vision's quota, 7-day limit
    assert running.status == "admitted"
    asked = timezone.now()

    answer = world.api(world.alice).post("/api/v1/jobs/preview/", {**MINIMAL, "priority": "high"}, format="json")

    answer = answer.json()
    assert answer["pending_reason"] == "quota_exhausted"
    likely, latest = datetime.fromisoformat(answer["estimated_start"]), datetime.fromisoformat(answer["latest_start"])
    assert abs(likely - (running.admitted_at + timedelta(hours=1))) < timedelta(seconds=5)  # like the last one
    assert latest - asked > timedelta(days=7)  # its limit, after its setup time


def test_the_form_shows_the_range_in_words(client, world):
    finished(submit(world, world.alice, gpus_per_worker=4, priority="high"), hours=1)
    submit(world, world.alice, gpus_per_worker=4, priority="high")
    signed_in(client, world.alice)
    words = form_preview(client, priority="high", code_url=MINIMAL["code_url"], command=MINIMAL["command"])
    assert "Would wait: Quota used up ; likely " in words and ", at the latest " in words
