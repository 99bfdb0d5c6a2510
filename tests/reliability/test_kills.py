"""The Celery worker and beat (the scheduler's periodic half) killed with SIGKILL at random points while jobs
are submitted, run, finish and are cancelled: afterwards every job is in a consistent final state, none is
lost, none ran twice at once, and every GPU is free again.

Jobs are real processes on the local executor; each takes an exclusive lock named after its job for as long
as it runs, so two runs of one job at the same time leave a DUPLICATE mark. Random but seeded: a failure
prints the seed and the kill times.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time

import pytest

from accounts.models import Department
from clusters.models import Storage
from jobs import lifecycle
from jobs.models import Job
from tests.jobs.test_job_flow import make_repo
from tests.processes import Processes

JOBS = 24  # a multiple of 4: every long job gets its cancel
KILLS = 20
SEED = int(os.environ.get("PORTAL_CHAOS_SEED", "20261203"))

JOB = """\
import fcntl, os, pathlib, random, sys, time
marks = pathlib.Path(os.environ["MARKS"])
name = os.environ["PORTAL_JOB_NAME"]
lock = open(marks / (name + ".lock"), "w")
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    (marks / (name + ".DUPLICATE")).write_text(os.environ["PORTAL_JOB_ID"])
    sys.exit(9)
with open(marks / (name + ".runs"), "a") as runs:
    runs.write(os.environ["PORTAL_JOB_ID"] + "\\n")
time.sleep(float(os.environ["SECONDS"]))
print("done", name, flush=True)
"""


class Chaos:
    """Keeps one worker and one beat running, SIGKILLing one of them at random moments."""

    def __init__(self, processes: Processes, rng: random.Random):
        self.processes, self.rng = processes, rng
        self.worker, self.beat = processes.worker(), processes.beat()
        self.kills: list[tuple[float, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(self.rng.uniform(0.3, 1.2)):
            name = self.rng.choice(["worker", "beat"])
            process = getattr(self, name)
            process.send_signal(signal.SIGKILL)
            process.wait()
            self.kills.append((round(time.monotonic() - started, 2), name))
            setattr(self, name, getattr(self.processes, name)())  # a supervisor restarts it

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


@pytest.fixture
def processes(tmp_path):
    running = Processes(tmp_path)
    running.purge_broker()
    yield running
    running.stop()


def settled() -> bool:
    return not Job.objects.exclude(status__in=lifecycle.FINAL).exists()


@pytest.mark.django_db(transaction=True)
def test_jobs_survive_the_worker_and_beat_being_killed_at_random(world, processes, tmp_path):
    rng = random.Random(SEED)
    marks = tmp_path / "marks"
    marks.mkdir()
    marks.chmod(0o777)  # written by the jobs, which run sandboxed as vision's uid and see it as a storage mount
    Storage.objects.create(department=Department.objects.get(slug="vision"), name="marks", local_path=str(marks))
    script = f"chaos_{os.getpid()}_{rng.randrange(1 << 32):08x}.py"  # a name only this test's processes have
    repo = make_repo(tmp_path / "repo", {script: JOB})
    client = world.api(world.alice)
    submitted, cancelled = [], set()

    with Chaos(processes, rng) as chaos:
        for index in range(JOBS):
            # Every fourth job would run for ten minutes: only its cancel can end it (a lost cancel shows).
            seconds = 600 if index % 4 == 0 else rng.uniform(0.2, 1.5)
            body = {
                "name": f"chaos-{index}",
                "department": "vision",
                "code_url": repo,
                "command": f"python {script}",
                "gpus_per_worker": rng.choice([1, 2]),
                "env": {"MARKS": "/marks", "SECONDS": f"{seconds:.2f}"},
                "mounts": [{"storage": "marks", "path": "/marks"}],
            }
            response = client.post("/api/v1/jobs/", body, format="json")
            assert response.status_code == 201, response.json()
            submitted.append(response.json()["id"])
            if index % 4 == 3:  # cancel the long one, and an earlier one wherever it is by now
                for victim in (submitted[index - 3], rng.choice(submitted)):
                    if client.post(f"/api/v1/jobs/{victim}/cancel/").status_code == 200:
                        cancelled.add(victim)
            time.sleep(rng.uniform(0.1, 0.6))
        deadline = time.monotonic() + 120
        while len(chaos.kills) < KILLS and time.monotonic() < deadline:
            time.sleep(0.2)

    # Workers and beat run on undisturbed now: everything must settle by itself (relaunch, re-cancel, reconcile).
    deadline = time.monotonic() + 180
    while not settled() and time.monotonic() < deadline:
        time.sleep(0.5)
    context = f"seed {SEED}, kills {chaos.kills}\n" + "\n".join(
        f"{job.pk} {job.name} {job.status} {job.status_message!r} {list(job.events.values_list('to_status', 'reason'))}"
        for job in Job.objects.order_by("pk")
    )
    assert len(chaos.kills) >= KILLS, context
    assert settled(), context + "\n" + processes.logs()[-20000:]

    jobs = {job.pk: job for job in Job.objects.all()}
    assert set(jobs) == set(submitted), context  # none lost, none made twice
    duplicates = sorted(path.name for path in marks.glob("*.DUPLICATE"))
    assert duplicates == [], context
    for pk, job in jobs.items():
        expected = {lifecycle.CANCELLED, lifecycle.SUCCEEDED} if pk in cancelled else {lifecycle.SUCCEEDED}
        assert job.status in expected, context
        if job.status == lifecycle.SUCCEEDED:
            runs = (marks / f"{job.name}.runs").read_text().split()
            assert job.run_id in runs, context
    pools = world.api(world.admin).get("/api/v1/clusters/").json()["results"]
    assert all(pool["allocated"] == 0 for cluster in pools for pool in cluster["pools"]), pools
    assert subprocess.run(["pgrep", "-f", script], capture_output=True).stdout == b""  # no job process left
