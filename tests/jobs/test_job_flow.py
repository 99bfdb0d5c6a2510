"""Jobs end to end on the local executor: API -> admission -> launch -> real processes -> ending -> GPUs released."""

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from core.celery import app as celery_app
from jobs import running
from jobs.models import Job
from tests.processes import Processes, wait_for

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]


def make_repo(path: Path, files: dict[str, str]) -> str:
    path.mkdir(parents=True)
    subprocess.run([*GIT, "init", "-q", str(path)], check=True)
    for name, text in files.items():
        (path / name).write_text(text)
    subprocess.run([*GIT, "-C", str(path), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(path), "commit", "-q", "-m", "init"], check=True)
    return f"file://{path}"


def head(url: str) -> str:
    return subprocess.run(
        ["git", "-C", url.removeprefix("file://"), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def status_of(job_id):
    return Job.objects.get(pk=job_id).status


def assert_gpus_released(world):
    pools = world.api(world.admin).get("/api/v1/clusters/").json()["results"][0]["pools"]
    assert pools[0]["allocated"] == 0
    usage = world.api(world.alice).get("/api/v1/departments/vision/").json()["usage"][0]
    assert usage["in_use"] == 0


@pytest.fixture
def processes(tmp_path):
    running = Processes(tmp_path)
    running.purge_broker()
    yield running
    running.stop()


@pytest.fixture
def repo(tmp_path):
    return make_repo(
        tmp_path / "repo",
        {
            "train.py": "import os, sys\nprint('hello from rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], flush=True)\n"
            "sys.exit(int(os.environ.get('EXIT_CODE', '0')))\n",
            "trap.sh": "trap 'echo checkpointed; exit 0' TERM\necho waiting\nwhile true; do sleep 0.1; done\n",
        },
    )


def submit(world, user, **fields):
    body = {
        "name": "flow",
        "department": "vision",
        "code_url": fields.pop("code_url"),
        "command": "python train.py",
    } | fields
    response = world.api(user).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


@pytest.mark.django_db(transaction=True)
def test_a_job_runs_through_a_real_worker_and_its_gpus_go_to_the_next_job(world, repo, processes):
    processes.worker()
    first = submit(world, world.alice, code_url=repo, workers=2, gpus_per_worker=4)
    second = submit(world, world.carol, code_url=repo, gpus_per_worker=1)
    assert (first["status"], second["status"], second["pending_reason"]) == ("admitted", "queued", "quota_exhausted")
    try:
        wait_for(lambda: status_of(first["id"]) == "succeeded", what="the first job to succeed")
        wait_for(lambda: status_of(second["id"]) == "succeeded", what="the second job to be admitted and succeed")
    except AssertionError:
        print(processes.logs())
        for job in Job.objects.all():
            print(
                job.pk, job.status, job.status_message, list(job.events.values_list("to_status", "reason", "message"))
            )
        raise
    client = world.api(world.alice)
    job = client.get(f"/api/v1/jobs/{first['id']}/").json()
    assert (job["exit_code"], job["commit"]) == (0, head(repo))
    assert job["gpu_seconds"] > 0 and job["started_at"] and job["finished_at"]
    events = client.get(job["events_url"]).json()["results"]
    assert [e["to_status"] for e in events] == ["queued", "admitted", "starting", "running", "succeeded"]
    log = client.get(f"{job['logs_url']}?worker=1").content.decode()
    assert "hello from rank 1 of 2" in log
    assert_gpus_released(world)


@pytest.mark.django_db(transaction=True)
def test_a_failing_command_fails_the_job_with_the_worker_and_its_last_lines(world, repo):
    job = submit(world, world.alice, code_url=repo, env={"EXIT_CODE": "3"})
    running.job_launch(job_id=job["id"])
    wait_for(lambda: status_of(job["id"]) == "failed", what="the job to fail")
    failed = Job.objects.get(pk=job["id"])
    assert failed.exit_code == 3
    assert "worker 0" in failed.status_message and "3" in failed.status_message
    assert "hello from rank 0 of 1" in failed.status_message  # the last lines of output
    assert failed.events.last().reason == "worker_failed"
    assert_gpus_released(world)


@pytest.mark.django_db(transaction=True)
def test_a_clone_failure_fails_the_job_with_gits_own_message(world, tmp_path):
    job = submit(world, world.alice, code_url=f"file://{tmp_path}/no-such-repo")
    running.job_launch(job_id=job["id"])
    wait_for(lambda: status_of(job["id"]) == "failed", what="the job to fail")
    failed = Job.objects.get(pk=job["id"])
    assert failed.events.last().reason == "clone_failed"
    assert "no-such-repo" in failed.status_message and "Traceback" not in failed.status_message
    assert_gpus_released(world)


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_running_job_gives_it_the_grace_period(world, repo):
    job = submit(world, world.alice, code_url=repo, command="bash trap.sh")
    running.job_launch(job_id=job["id"])
    wait_for(
        lambda: "waiting" in world.api(world.alice).get(f"/api/v1/jobs/{job['id']}/logs/").content.decode(),
        what="the job to start waiting",
    )
    response = world.api(world.carol).post(f"/api/v1/jobs/{job['id']}/cancel/")
    assert response.status_code == 200
    assert response.json()["status_message"].startswith("Cancelling (by carol): workers get SIGTERM and 30 s")
    running.job_stop_on_executor(job_id=job["id"])  # what the cancel task does in the worker
    wait_for(lambda: status_of(job["id"]) == "cancelled", what="the job to be cancelled")
    log = world.api(world.alice).get(f"/api/v1/jobs/{job['id']}/logs/").content.decode()
    assert "checkpointed" in log
    assert Job.objects.get(pk=job["id"]).gpu_seconds > 0
    assert_gpus_released(world)


@pytest.mark.django_db(transaction=True)
def test_a_job_past_its_max_runtime_fails_as_deadline_exceeded(world, repo):
    job = submit(world, world.alice, code_url=repo, command="sleep 60", max_runtime_seconds=1)
    running.job_launch(job_id=job["id"])
    wait_for(lambda: status_of(job["id"]) == "failed", what="the deadline", timeout=45)
    assert Job.objects.get(pk=job["id"]).events.last().reason == "deadline_exceeded"
    assert_gpus_released(world)


@pytest.mark.django_db(transaction=True)
def test_following_logs_streams_until_the_job_ends(world, repo):
    job = submit(world, world.alice, code_url=repo, command="for i in 1 2 3; do echo line $i; sleep 0.2; done")
    running.job_launch(job_id=job["id"])
    response = world.api(world.alice).get(f"/api/v1/jobs/{job['id']}/logs/?follow=1")
    assert response["Content-Type"].startswith("text/plain")
    body = "".join(_drain_while_reconciling(response))
    assert [line for line in body.splitlines() if line.startswith("line ")] == ["line 1", "line 2", "line 3"]
    assert status_of(job["id"]) == "succeeded"


def _drain_while_reconciling(response):
    """Read a streaming response to its end while a thread plays the periodic reconcile task."""
    import asyncio
    import threading

    from asgiref.sync import sync_to_async
    from django.db import connection, connections

    stop = threading.Event()

    def reconcile():
        try:
            while not stop.is_set():
                running.jobs_reconcile()
                stop.wait(0.1)
        finally:
            connection.close()

    async def drain():
        chunks = [chunk.decode() if isinstance(chunk, bytes) else chunk async for chunk in response.streaming_content]
        # The stream read the database from sync_to_async's thread: close that
        # thread's connection, or PostgreSQL cannot drop the test database.
        await sync_to_async(connections.close_all)()
        return chunks

    thread = threading.Thread(target=reconcile)
    thread.start()
    try:
        return asyncio.run(asyncio.wait_for(drain(), 60))
    finally:
        stop.set()
        thread.join()


@pytest.mark.django_db
def test_log_parameters_are_checked(world, repo):
    job = submit(world, world.alice, code_url=repo)
    response = world.api(world.alice).get(f"/api/v1/jobs/{job['id']}/logs/?worker=5&tail=zero")
    assert response.status_code == 400
    assert response.json() == {
        "worker": ["Give a whole number from 0 to 0."],
        "tail": ["Give a whole number from 1 to 100000."],
    }


@pytest.mark.django_db(transaction=True)
def test_a_department_reclaims_its_gpus_from_a_preemptible_borrower(world, repo):
    borrower = submit(
        world, world.bob, department="nlp", code_url=repo, command="bash trap.sh", gpus_per_worker=8, priority="low"
    )
    running.job_launch(job_id=borrower["id"])
    wait_for(lambda: status_of(borrower["id"]) == "running", what="the borrower to run")
    claimant = submit(world, world.alice, code_url=repo, gpus_per_worker=2)
    assert (claimant["status"], claimant["pending_reason"]) == ("queued", "preemption_in_progress")
    assert f"#{borrower['id']} (nlp, reclaim)" in claimant["status_message"]
    victim = Job.objects.get(pk=borrower["id"])
    assert victim.preempt_reason == "reclaim" and victim.status == "running"
    running.job_stop_on_executor(job_id=victim.pk)  # what the cancel task does in the worker
    wait_for(lambda: status_of(claimant["id"]) == "admitted", what="the claimant to be admitted")
    victim.refresh_from_db()
    assert victim.status == "queued" and victim.created_at.isoformat().startswith(borrower["created_at"][:19])
    assert (victim.preemptions, victim.pending_reason) == (1, "quota_exhausted")
    assert victim.lost_gpu_seconds > 0
    events = list(victim.events.values_list("to_status", "reason"))
    assert events[-2:] == [("preempted", "reclaim"), ("queued", "requeued")]
    log = world.api(world.bob).get(f"/api/v1/jobs/{victim.pk}/logs/").content.decode()
    assert "checkpointed" in log  # the stopped run's log stays readable until the job runs again


@pytest.mark.django_db(transaction=True)
def test_a_cancel_whose_task_was_lost_is_sent_again_by_the_reconcile(world, repo, monkeypatch):
    job = submit(world, world.alice, code_url=repo, command="bash trap.sh")
    running.job_launch(job_id=job["id"])
    wait_for(
        lambda: "waiting" in world.api(world.alice).get(f"/api/v1/jobs/{job['id']}/logs/").content.decode(),
        what="the job to start waiting",
    )
    sent = []
    # The broker is what leaves the process: record what the portal sends to the worker.
    monkeypatch.setattr(
        celery_app, "send_task", lambda name, args=None, kwargs=None, **options: sent.append((name, list(args or ())))
    )
    # The user cancelled, but the worker that held the cancel task died with it: only the row says so.
    response = world.api(world.alice).post(f"/api/v1/jobs/{job['id']}/cancel/")
    assert response.status_code == 200 and sent == [("jobs.tasks.cancel_job", [job["id"]])]
    sent.clear()
    running.jobs_reconcile()
    assert sent == []  # within the grace period: the first request may still be under way

    late = timezone.now() - timedelta(seconds=30 + running.RESEND_STOP_AFTER_SECONDS + 1)  # grace 30 s
    Job.objects.filter(pk=job["id"]).update(cancel_requested_at=late)
    running.jobs_reconcile()
    assert sent == [("jobs.tasks.cancel_job", [job["id"]])]
    running.job_stop_on_executor(job_id=job["id"])  # what that task does
    wait_for(lambda: status_of(job["id"]) == "cancelled", what="the job to be cancelled")
