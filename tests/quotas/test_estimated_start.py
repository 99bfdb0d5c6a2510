"""A waiting job's estimated start is never in the past: in the pure core, in the queue API and on the queue page."""

from datetime import timedelta

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from hypothesis import given, settings
from hypothesis import strategies as st

from clusters.models import Cluster
from jobs.admission import scheduling_cycle
from jobs.models import Job
from quotas.models import Quota
from quotas.scheduler import PendingJob, PoolState, QuotaState, RunningJob, Slot, Snapshot, schedule
from quotas.scheduler.eta import expected_end

NOW = 100_000.0


def whole_pool_job(deadline):
    return RunningJob(
        job_id=10,
        pool_id=1,
        department="nlp",
        priority=500,
        preemptible=False,
        gpus=8.0,
        slots=(Slot(worker=0, node="n0", gpus=tuple(range(8))),),
        started_at=NOW - 7200,
        deadline=deadline,
    )


def estimates(running_jobs, pending_jobs):
    used = {(s.node, g): 1.0 for job in running_jobs for s in job.slots for g in s.gpus}
    snapshot = Snapshot(
        pools={1: PoolState(pool_id=1, name="local/sim", nodes=("n0",), gpus_per_node=8, shareable=True, used=used)},
        pending=tuple(pending_jobs),
        running=tuple(running_jobs),
        quotas=(
            QuotaState(department="vision", pool_id=1, nominal=0),
            QuotaState(department="nlp", pool_id=1, nominal=8),
        ),
    )
    return [w.estimated_start for w in schedule(snapshot, now=NOW).waiting]


def waiting(job_id, gpus=8.0, runtime=600.0):
    return PendingJob(
        job_id=job_id,
        pool_id=1,
        department="vision",
        priority=500,
        submitted_at=job_id,
        workers=1,
        gpus_per_worker=gpus,
        max_runtime=runtime,
    )


@pytest.mark.parametrize(
    ("deadline", "expected"),
    [
        (NOW + 900, [NOW + 900, NOW + 1500]),  # due later: waits for it, then for the first waiting job
        (NOW - 600, [NOW, NOW + 600]),  # over its limit and still stopping: any moment now, not ten minutes ago
        (NOW - 86400, [NOW, NOW + 600]),
        (None, [None, None]),  # no limit: nobody can say; nothing behind it gets an estimate either
    ],
)
def test_estimates_start_no_earlier_than_the_cycle(deadline, expected):
    assert estimates([whole_pool_job(deadline)], [waiting(1), waiting(2)]) == expected


@pytest.mark.parametrize(
    ("admitted_at", "running_since", "max_runtime", "setup", "end"),
    [
        (1000.0, 1300.0, 600.0, 1800.0, 1900.0),  # running: its limit counts from when it began to run
        (1000.0, None, 600.0, 1800.0, 3400.0),  # admitted or starting: its setup may still take the whole timeout
        (1000.0, None, 600.0, 30.0, 1630.0),
        (1000.0, None, None, 1800.0, None),  # no runtime limit: it may hold its GPUs for ever
    ],
)
def test_a_job_gives_its_gpus_back_after_setup_and_runtime(admitted_at, running_since, max_runtime, setup, end):
    assert (
        expected_end(admitted_at=admitted_at, running_since=running_since, max_runtime=max_runtime, setup_seconds=setup)
        == end
    )


@settings(max_examples=150, deadline=None)
@given(
    deadlines=st.lists(st.one_of(st.none(), st.floats(NOW - 10 * 86400, NOW + 86400)), min_size=1, max_size=8),
    queue=st.lists(
        st.tuples(st.sampled_from([0.5, 1.0, 2.0, 4.0, 8.0]), st.one_of(st.none(), st.floats(1, 86400))),
        min_size=1,
        max_size=12,
    ),
)
def test_no_estimate_is_ever_before_now(deadlines, queue):
    running_jobs = [
        RunningJob(
            job_id=100 + index,
            pool_id=1,
            department="nlp",
            priority=500,
            preemptible=False,
            gpus=1.0,
            slots=(Slot(worker=0, node="n0", gpus=(index,)),),
            started_at=NOW - 86400,
            deadline=deadline,
        )
        for index, deadline in enumerate(deadlines)
    ]
    pending_jobs = [waiting(index + 1, gpus=gpus, runtime=runtime) for index, (gpus, runtime) in enumerate(queue)]
    assert all(eta is None or eta >= NOW for eta in estimates(running_jobs, pending_jobs))


# --- Through the portal ------------------------------------------------------------------------------------

JOB = {"name": "q", "department": "vision", "code_url": "https://git.example.com/r.git", "command": "python train.py"}


@pytest.fixture
def vision_owns_the_pool(world):
    # Only then does vision's unpreemptible job hold all 8 GPUs, and nlp's jobs wait for them to come back.
    Quota.objects.filter(department__slug="vision").update(nominal=8)
    Quota.objects.filter(department__slug="nlp").update(nominal=0)
    return world


def submit(world, user, **fields):
    response = world.api(user).post("/api/v1/jobs/", {**JOB, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def queue_estimates(world):
    before = timezone.now()
    response = world.api(world.admin).get("/api/v1/queue/?cluster=local&gpu_type=sim")
    assert response.status_code == 200
    return before, {
        job["id"]: job["estimated_start"] and parse_datetime(job["estimated_start"])
        for job in response.json()["results"]
    }


def test_the_queue_never_shows_a_start_before_the_response(vision_owns_the_pool):
    world = vision_owns_the_pool
    holder = submit(world, world.alice, name="whole-pool", gpus_per_worker=8, max_runtime_seconds=60, priority="high")
    now = timezone.now()
    # It began running two hours ago with a one-minute limit: it is being stopped, its GPUs are due back now.
    Job.objects.filter(pk=holder.pk).update(
        status="running",
        admitted_at=now - timedelta(hours=2),
        started_at=now - timedelta(hours=2) + timedelta(seconds=5),
    )
    first = submit(world, world.bob, department="nlp", name="next", max_runtime_seconds=600)
    second = submit(world, world.bob, department="nlp", name="after", gpus_per_worker=8)
    scheduling_cycle()
    before, shown = queue_estimates(world)
    assert set(shown) == {first.pk, second.pk}
    assert all(eta is not None and eta >= before for eta in shown.values()), shown
    # An estimate stored by an earlier cycle that has since gone by is shown as the time of the response.
    Job.objects.filter(pk=first.pk).update(estimated_start=now - timedelta(hours=1))
    before, shown = queue_estimates(world)
    assert before <= shown[first.pk] <= timezone.now()


def test_the_queue_page_says_any_moment_for_an_estimate_gone_by(client, world):
    submit(world, world.alice, name="holder", gpus_per_worker=8)  # takes the pool's 8 GPUs
    waiting_job = submit(world, world.alice, name="late-estimate", gpus_per_worker=8)
    assert Job.objects.get(pk=waiting_job.pk).status == "queued"
    Job.objects.filter(status="queued").update(estimated_start=timezone.now() - timedelta(hours=1))
    client.force_login(world.alice)
    html = client.get("/queue/?cluster=local&gpu_type=sim").content.decode()
    assert "late-estimate" in html
    assert "any moment" in html and "in 0" not in html


def test_a_job_still_setting_up_counts_its_setup_time_before_its_gpus_come_back(vision_owns_the_pool):
    world = vision_owns_the_pool
    Cluster.objects.filter(name="local").update(settings={"allow_local_code": True, "setup_timeout_seconds": 1800})
    holder = submit(world, world.alice, name="setting-up", gpus_per_worker=8, max_runtime_seconds=600, priority="high")
    admitted = timezone.now() - timedelta(minutes=20)
    # Admitted twenty minutes ago and still cloning: 600 s of runtime would be over, but it has not run yet.
    Job.objects.filter(pk=holder.pk).update(status="starting", admitted_at=admitted, started_at=None)
    waiting_job = submit(world, world.bob, department="nlp", name="behind", gpus_per_worker=8)
    scheduling_cycle()
    _, shown = queue_estimates(world)
    assert shown[waiting_job.pk] == admitted + timedelta(seconds=1800 + 600)
