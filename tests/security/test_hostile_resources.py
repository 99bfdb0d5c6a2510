"""Limits on what a job holds: a setup that hangs ends at the cluster's setup timeout and gives its GPUs back
(the same hanging setup with and without the timeout, each under a real Celery worker)."""

from __future__ import annotations

import sys

import pytest
from django.utils import timezone

from jobs.models import Job
from tests.jobs.executor_harness import slow_package
from tests.jobs.test_job_flow import make_repo
from tests.security import hostile
from tests.security.hostile import allocated, ended, in_use, job_of, log_of, set_cluster, submit
from tests.security.hostile_scenario import celery_worker

# The database mark makes pytest-django create the test database even when only scenario tests are selected.
pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local executor needs Linux"),
    pytest.mark.django_db,
]


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker, tmp_path_factory):
    """A real Celery worker on the test database, for the module: it launches the jobs."""
    with django_db_blocker.unblock(), celery_worker(tmp_path_factory.mktemp("hostile-processes")) as worker:
        yield worker


@pytest.mark.django_db(transaction=True)
def test_8_a_hanging_setup_ends_at_the_setup_timeout_and_gives_its_gpus_back(world, portal, tmp_path):
    requirement = slow_package(tmp_path / "slowpkg")
    repo = make_repo(tmp_path / "repo", {"train.py": "print('never')\n"})
    fields = {"code_url": repo, "requirements": [requirement], "gpus_per_worker": 2, "max_runtime_seconds": 5}

    # Without the limit (the most the settings allow), launched first.
    set_cluster(setup_timeout_seconds=86400)
    unlimited = submit(world, world.alice, name="unlimited", department="vision", **fields)
    hostile.wait_for(lambda: "resolving" in log_of(world, world.alice, unlimited["id"]), what="its setup to hang")
    # With it: 5 s rather than the 30 s minimum the validator allows, to keep the suite fast; same mechanism.
    set_cluster(setup_timeout_seconds=5)
    limited = submit(world, world.bob, name="limited", department="nlp", **fields)
    limited = ended(world, world.bob, limited["id"], timeout=40)

    assert (limited["status"], limited["started_at"]) == ("failed", None), limited
    assert Job.objects.get(pk=limited["id"]).events.last().reason == "setup_timeout"
    assert "setup_timeout_seconds (5 s)" in limited["status_message"]
    assert in_use(world, world.bob, "nlp") == 0

    # The job without the limit has been setting up for longer, and is still at it.
    still = job_of(world, world.alice, unlimited["id"])
    setting_up = (timezone.now() - Job.objects.get(pk=unlimited["id"]).launched_at).total_seconds()
    assert (still["status"], still["started_at"]) == ("starting", None) and setting_up > 5, (still, setting_up)
    assert world.api(world.alice).post(f"/api/v1/jobs/{unlimited['id']}/cancel/").status_code == 200
    assert ended(world, world.alice, unlimited["id"], timeout=30)["status"] == "cancelled"
    assert allocated(world) == 0
