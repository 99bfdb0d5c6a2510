"""Resume after preemption, the portal's side: lost GPU-time counted from the job's checkpoint marker,
the job page and the usage report showing it, and one TensorBoard with every run of a job.

The executor's reports are fed to jobs.services.job_observe as the reconcile would (ObservedState with
``checkpoint_at``, the mtime of PORTAL_CHECKPOINT_DIR/.portal-checkpoint); the preemption itself is a real
reclaim by the scheduler. The run through real processes is tests/examples/test_digits.py.
"""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
from django.test import Client
from django.utils import timezone
from tensorboardX import SummaryWriter

from jobs import running
from jobs.executors.base import CANCELLED, RUNNING, ObservedState
from jobs.models import Job
from tests.jobs.test_tensorboard import poll, portal, tags, wait_running  # noqa: F401  (portal is a fixture)

REPO = "https://git.example.com/team/repo.git"
HOUR = 3600


def submit(world, user, **fields):
    body = {"name": "resume", "department": "vision", "code_url": REPO, "command": "python train.py"} | fields
    response = world.api(user).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


@pytest.fixture
def borrower(world):
    """nlp's low-priority job on all 8 GPUs, running since two hours ago (its admission moved back to then)."""
    job = submit(world, world.bob, department="nlp", name="borrower", gpus_per_worker=8, priority="low")
    assert job.status == "admitted"
    Job.objects.filter(pk=job.pk).update(admitted_at=timezone.now().replace(microsecond=0) - timedelta(hours=2))
    job.refresh_from_db()
    running.job_observe(job=job, state=ObservedState(phase=RUNNING, started_at=at(job, 60)))
    job.refresh_from_db()
    assert job.status == "running"
    return job


def at(job: Job, seconds: float) -> float:
    """Epoch seconds, ``seconds`` after the job's admission."""
    return job.admitted_at.timestamp() + seconds


def reclaim(world, job: Job, *, checkpoint_at: float | None, stopped_after: float = 1.5 * HOUR) -> Job:
    """vision takes its GPUs back; the borrower's run stops ``stopped_after`` seconds after its admission."""
    submit(world, world.alice, name="claimant", gpus_per_worker=2)
    job.refresh_from_db()
    assert (job.preempt_reason, job.status) == ("reclaim", "running")
    running.job_observe(
        job=job,
        state=ObservedState(
            phase=CANCELLED, reason="cancelled", finished_at=at(job, stopped_after), checkpoint_at=checkpoint_at
        ),
    )
    job.refresh_from_db()
    return job


def preempted_event(job: Job):
    return job.events.filter(to_status="preempted").last()


@pytest.mark.django_db
def test_a_preempted_run_loses_only_the_gpu_time_since_its_checkpoint_marker(world, borrower):
    checkpoint = timezone.localtime(borrower.admitted_at + timedelta(hours=1))
    job = reclaim(world, borrower, checkpoint_at=at(borrower, HOUR))

    assert (job.status, job.preemptions) == ("queued", 1)
    assert job.lost_gpu_seconds == pytest.approx(8 * 0.5 * HOUR)  # 8 GPUs from the checkpoint (1 h) to the stop (1.5 h)
    assert preempted_event(job).message == (
        f"Stopped because its department's borrowed GPUs were reclaimed; 14400 GPU-seconds lost since its last "
        f"checkpoint at {checkpoint:%H:%M:%S}."
    )
    body = world.api(world.bob).get(f"/api/v1/jobs/{job.pk}/").json()
    assert (body["preemptions"], body["lost_gpu_seconds"]) == (1, pytest.approx(14400))


@pytest.mark.django_db
def test_a_run_without_a_checkpoint_marker_loses_all_of_its_gpu_time(world, borrower):
    job = reclaim(world, borrower, checkpoint_at=None)

    assert job.lost_gpu_seconds == pytest.approx(8 * 1.5 * HOUR)
    assert preempted_event(job).message == (
        "Stopped because its department's borrowed GPUs were reclaimed; 43200 GPU-seconds lost since the run "
        "started; it wrote no checkpoint marker during the run."
    )


@pytest.mark.django_db
def test_a_marker_reported_while_running_counts_when_the_stop_reports_none(world, borrower):
    running.job_observe(
        job=borrower,
        state=ObservedState(phase=RUNNING, started_at=at(borrower, 60), checkpoint_at=at(borrower, 1.25 * HOUR)),
    )
    borrower.refresh_from_db()
    assert borrower.checkpoint_at == borrower.admitted_at + timedelta(hours=1.25)
    assert borrower.status == "running"

    job = reclaim(world, borrower, checkpoint_at=None)

    assert job.lost_gpu_seconds == pytest.approx(8 * 0.25 * HOUR)


@pytest.mark.django_db
def test_a_checkpoint_of_an_earlier_run_saves_nothing_of_this_one(world, borrower):
    # The marker is the job's: it was last touched 10 minutes before this run was admitted.
    job = reclaim(world, borrower, checkpoint_at=at(borrower, -600))

    assert job.lost_gpu_seconds == pytest.approx(8 * 1.5 * HOUR)
    assert "it wrote no checkpoint marker during the run" in preempted_event(job).message


@pytest.mark.django_db
def test_the_job_page_shows_its_runs_and_lost_gpu_hours(world, borrower):
    checkpoint = timezone.localtime(borrower.admitted_at + timedelta(hours=1))
    job = reclaim(world, borrower, checkpoint_at=at(borrower, HOUR))
    client = Client()
    client.force_login(world.bob)

    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert '<dt>Runs</dt><dd>1 <span class="muted">(Preemptions: 1)</span></dd>' in page
    assert "(4 GPU-hours lost to preemption)" in page
    assert f'<dt>Last checkpoint</dt><dd><time datetime="{checkpoint.astimezone(UTC).isoformat()}"' in page


@pytest.mark.django_db
def test_the_usage_report_shows_lost_gpu_hours_beside_gpu_hours(world, borrower):
    reclaim(world, borrower, checkpoint_at=at(borrower, HOUR))

    body = world.api(world.bob).get("/api/v1/usage/", {"department": "nlp"}).json()

    assert body["lost_gpu_hours"] == 4.0
    assert body["totals"] == [{"department": "nlp", "gpu_hours": body["gpu_hours"], "lost_gpu_hours": 4.0}]
    client = Client()
    client.force_login(world.admin)
    page = client.get("/console/usage/", {"department": "nlp"}).content.decode()
    assert "(4 lost to preemption)" in page


def test_one_board_shows_every_run_of_a_job_beside_its_runs_of_the_old_layout(portal, settings):
    job = submit(portal, portal.alice, name="resumed", gpus_per_worker=0.25, tensorboard=True)
    executor_root = settings.PORTAL_DATA_ROOT / "executors" / job.cluster.name
    # A run of before the per-job folders (<root>/jobs/<run id>/tensorboard/), then two runs of today's layout.
    old_run = f"{job.pk}-0badcafe"
    with SummaryWriter(logdir=str(executor_root / "jobs" / old_run / "tensorboard")) as writer:
        writer.add_scalar("loss", 1.0, 0)
    for run_index in (0, 1):
        with SummaryWriter(logdir=str(executor_root / "tensorboard" / job.storage_key / f"run-{run_index}")) as writer:
            writer.add_scalar("loss", 0.5 / (run_index + 1), run_index + 1)

    assert portal.api(portal.alice).post(f"/api/v1/jobs/{job.pk}/tensorboard/").status_code in (200, 201, 202)
    wait_running(portal, f"/api/v1/jobs/{job.pk}/tensorboard/")

    runs = poll(lambda: len(t := tags(f"/tensorboard/{job.pk}/", portal.alice)) == 3 and t, what="three runs")
    assert sorted(runs) == sorted([f"resumed-{old_run}", f"resumed-{job.pk}/run-0", f"resumed-{job.pk}/run-1"])


def test_a_checkpoint_marker_dated_in_the_future_is_not_believed(world, borrower):
    # The job owns its marker and can set its mtime: a date to come would make every preemption cost nothing.
    job = reclaim(world, borrower, checkpoint_at=timezone.now().timestamp() + 86400)
    assert job.checkpoint_at is None
    assert job.lost_gpu_seconds == pytest.approx(8 * 1.5 * HOUR)
