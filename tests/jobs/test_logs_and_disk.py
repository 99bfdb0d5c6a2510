"""Logs and disk that stay healthy (issue 16 item 7): bounded log reads through the API, the per-job log cap and
the disk limit on real jobs of the local executor."""

from __future__ import annotations

import builtins
import json
import shutil
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from jobs import running
from jobs.executors import local as local_executor
from jobs.models import Job
from tests.jobs.test_job_flow import assert_gpus_released, make_repo, status_of, submit
from tests.processes import wait_for

MB50 = 50 * 1024 * 1024


def run_dir(job: Job) -> Path:
    return settings.PORTAL_DATA_ROOT / "executors" / job.cluster.name / "jobs" / job.run_id


@pytest.fixture
def counted_reads(monkeypatch):
    """Bytes the local executor reads from job logs, through a counting wrapper around its files."""
    counted = {"bytes": 0}

    class CountingFile:
        def __init__(self, file):
            self.file = file

        def read(self, size=-1):
            data = self.file.read(size)
            counted["bytes"] += len(data)
            return data

        def __getattr__(self, name):
            return getattr(self.file, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

    def counting_open(path, *args, **kwargs):
        return CountingFile(builtins.open(path, *args, **kwargs))

    monkeypatch.setattr(local_executor, "open", counting_open, raising=False)
    return counted


@pytest.mark.django_db
def test_a_50_mb_line_is_answered_cut_and_marked_after_reading_a_bounded_number_of_bytes(world, counted_reads, request):
    created = submit(world, world.alice, code_url="file:///nowhere", command="true")
    Job.objects.filter(pk=created["id"]).update(status="succeeded", run_id=f"{created['id']}-{uuid.uuid4().hex[:8]}")
    job = Job.objects.get(pk=created["id"])
    folder = run_dir(job)
    (folder / "logs").mkdir(parents=True)
    # Whose run this is (launch.json's job key), as the executor writes it: without it the folder would be taken
    # as a run of any later job with the same id in the shared data root (models_registry.selectors.job_run_dirs).
    (folder / "launch.json").write_text(json.dumps({"job": {"job_key": job.storage_key}}))
    (folder / "state.json").write_text(json.dumps({"phase": "succeeded"}))
    with open(folder / "logs" / "worker-0.log", "wb") as log:
        log.write(b"epoch 1\n" + b"x" * MB50 + b"\nepoch 2\n")
    request.addfinalizer(lambda: shutil.rmtree(folder, ignore_errors=True))  # 50 MB of a fabricated run

    api = world.api(world.alice)
    answer = api.get(f"/api/v1/jobs/{job.pk}/logs/").content.decode()
    assert counted_reads["bytes"] < 2 * 1024 * 1024, counted_reads  # not the 50 MB
    lines = answer.splitlines()
    assert lines[-1] == "epoch 2" and lines[-2].startswith("… [line cut: more than ")
    assert len(answer) < 100_000

    counted_reads["bytes"] = 0
    answer = api.get(f"/api/v1/jobs/{job.pk}/logs/?tail=1").content.decode()
    assert answer == "epoch 2\n" and counted_reads["bytes"] < 256 * 1024


@pytest.fixture
def repo(tmp_path):
    return make_repo(
        tmp_path / "repo",
        {
            # Prints past the cap in one go, then carries on: proof that the job kept running is a file it writes
            # after the cut, and a line that must not reach the log.
            "chatty.py": "import os, sys\n"
            "sys.stdout.write('a' * 300_000 + '\\n'); sys.stdout.flush()\n"
            "print('after the cut', flush=True)\n"
            "open(os.path.join(os.environ['PORTAL_OUTPUT_DIR'], 'done.txt'), 'w').write('kept running')\n",
            "filler.py": "import os, time\n"
            "with open(os.path.join(os.environ['PORTAL_OUTPUT_DIR'], 'big.bin'), 'wb') as f:\n"
            "    for _ in range(24):\n"
            "        f.write(os.urandom(1024 * 1024)); f.flush()\n"
            "print('wrote 24 MiB', flush=True)\n"
            "time.sleep(120)\n",
        },
    )


@pytest.mark.django_db(transaction=True)
def test_a_job_printing_past_the_log_cap_keeps_running_and_its_log_says_it_was_cut(world, repo, settings):
    settings.PORTAL_JOB_LOG_MAX_BYTES = 64 * 1024
    job = submit(world, world.alice, code_url=repo, command="python chatty.py")
    running.job_launch(job_id=job["id"])
    wait_for(lambda: status_of(job["id"]) in ("succeeded", "failed"), what="the job to end")
    ended = Job.objects.get(pk=job["id"])
    assert ended.status == "succeeded", ended.status_message
    folder = run_dir(ended)
    assert (folder / "output" / "done.txt").read_text() == "kept running"
    log = (folder / "logs" / "worker-0.log").read_bytes()
    assert len(log) < 64 * 1024 + 1024
    text = world.api(world.alice).get(f"/api/v1/jobs/{job['id']}/logs/").content.decode()
    assert "[portal] log cut: it reached 65,536 bytes (PORTAL_JOB_LOG_MAX_BYTES)" in text
    assert "bytes of output after the cut were dropped" in text.splitlines()[-1]
    assert "after the cut" not in text.replace("after the cut were dropped", "")
    assert "… [line cut: " in text  # the long line itself is shown cut


@pytest.mark.django_db(transaction=True)
def test_a_job_writing_past_the_disk_limit_fails_with_the_reason_and_releases_its_gpus(world, repo, settings):
    settings.PORTAL_JOB_DISK_MAX_BYTES = 8 * 1024 * 1024
    job = submit(world, world.alice, code_url=repo, command="python filler.py")
    running.job_launch(job_id=job["id"])
    wait_for(lambda: status_of(job["id"]) in ("succeeded", "failed"), what="the job to be stopped", timeout=90)
    failed = Job.objects.get(pk=job["id"])
    assert failed.status == "failed"
    event = failed.events.last()
    assert event.reason == "disk_limit_exceeded"
    assert "over the 8.0 MiB limit (PORTAL_JOB_DISK_MAX_BYTES)" in event.message
    assert event.message.startswith("The job wrote ") and "MiB" in event.message
    assert_gpus_released(world)
