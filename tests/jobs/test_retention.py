"""Retention (issue 16 item 7): finished jobs' files go after PORTAL_JOB_RETENTION_DAYS, unused environments after
PORTAL_JOB_ENV_UNUSED_DAYS (never one a running job uses), and both clean-ups are in beat's schedule."""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from core.celery import app as celery_app
from jobs import retention, running
from jobs.executors.venvs import COMPLETE
from jobs.models import Job
from tests.jobs.test_job_flow import make_repo, status_of, submit
from tests.processes import wait_for

DAY = 86400


def run_dir(job: Job):
    return django_settings.PORTAL_DATA_ROOT / "executors" / job.cluster.name / "jobs" / job.run_id


def finished_job(world, repo) -> Job:
    job = submit(world, world.alice, code_url=repo, command="python write.py")
    running.job_launch(job_id=job["id"])
    wait_for(lambda: status_of(job["id"]) == "succeeded", what="the job to succeed")
    return Job.objects.get(pk=job["id"])


@pytest.fixture
def repo(tmp_path):
    return make_repo(
        tmp_path / "repo",
        {"write.py": "import os\nopen(os.path.join(os.environ['PORTAL_OUTPUT_DIR'], 'model.txt'), 'w').write('w')\n"},
    )


@pytest.mark.django_db(transaction=True)
def test_a_job_finished_longer_ago_than_the_retention_loses_its_files_and_says_so(world, repo, settings):
    settings.PORTAL_JOB_RETENTION_DAYS = 30
    old, recent = finished_job(world, repo), finished_job(world, repo)
    Job.objects.filter(pk=old.pk).update(finished_at=timezone.now() - timedelta(days=31))
    checkpoints = run_dir(old).parent.parent / "checkpoints" / old.storage_key
    assert (run_dir(old) / "output" / "model.txt").exists() and checkpoints.is_dir()

    assert retention.jobs_files_clean_up()["local"]["jobs"] == 1
    assert not run_dir(old).exists() and not checkpoints.exists()
    assert (run_dir(recent) / "output" / "model.txt").exists()  # ended yesterday: kept
    api = world.api(world.alice)
    assert api.get(f"/api/v1/jobs/{old.pk}/").json()["files_removed_at"] is not None
    assert api.get(f"/api/v1/jobs/{recent.pk}/").json()["files_removed_at"] is None
    assert api.get(f"/api/v1/jobs/{old.pk}/logs/").content == b""  # nothing left to read, and no error

    world_client = api.__class__()
    world_client.force_login(world.alice)
    page = world_client.get(f"/jobs/{old.pk}/").content.decode()
    assert "were removed on" in page and "31 days after it ended (PORTAL_JOB_RETENTION_DAYS)" in page
    assert retention.jobs_files_clean_up()["local"]["jobs"] == 0  # once


@pytest.mark.django_db(transaction=True)
def test_retention_0_keeps_every_job_s_files(world, repo, settings):
    settings.PORTAL_JOB_RETENTION_DAYS = 0
    job = finished_job(world, repo)
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now() - timedelta(days=3650))
    assert retention.jobs_files_clean_up()["local"]["jobs"] == 0
    assert (run_dir(job) / "output" / "model.txt").exists()


def make_env(root, name, *, used_days_ago):
    env = root / "envs" / "vision" / name
    env.mkdir(parents=True)
    (env / COMPLETE).write_text(name)
    stamp = time.time() - used_days_ago * DAY
    os.utime(env / COMPLETE, (stamp, stamp))
    return env


@pytest.mark.django_db
def test_environments_unused_for_the_setting_are_evicted_but_never_one_a_running_job_uses(world, settings, tmp_path):
    settings.PORTAL_JOB_ENV_UNUSED_DAYS = 14
    settings.PORTAL_DATA_ROOT = tmp_path / "data"
    root = django_settings.PORTAL_DATA_ROOT / "executors" / "local"
    stale, fresh, used, busy = (
        make_env(root, "stale", used_days_ago=20),
        make_env(root, "fresh", used_days_ago=2),
        make_env(root, "used-by-a-running-job", used_days_ago=60),
        make_env(root, "being-reused-now", used_days_ago=60),
    )
    run = root / "jobs" / "999-abcd"
    run.mkdir(parents=True)
    (run / "state.json").write_text(json.dumps({"phase": "running", "env": str(used)}))
    with open(busy.parent / f"{busy.name}.lock", "a") as lock:  # what Envs._reuse holds while a job takes it
        fcntl.flock(lock.fileno(), fcntl.LOCK_SH)
        assert retention.jobs_files_clean_up()["local"]["envs"] == 1
    assert not stale.exists()
    assert fresh.exists() and used.exists() and busy.exists()


def test_the_clean_ups_run_periodically():
    tasks = {entry["task"] for entry in django_settings.CELERY_BEAT_SCHEDULE.values()}
    assert {"jobs.tasks.collect_garbage", "jobs.tasks.clean_up_job_files"} <= tasks
    assert {"jobs.tasks.collect_garbage", "jobs.tasks.clean_up_job_files"} <= set(celery_app.tasks)
