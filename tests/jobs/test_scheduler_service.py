"""The scheduler service in-process (jobs/scheduler_service.py, core/leases.py): requests only record, the leader
runs one cycle for a burst, requests are deleted only once a cycle handled them, one leader at a time, and the
reconcile covers for a service that is down. The processes themselves: tests/reliability/test_scheduler_service.py.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from core import heartbeats
from core.leases import LeaseRow
from core.models import Heartbeat, Lease
from jobs import admission, lifecycle
from jobs.models import CycleRequest, Job
from jobs.scheduler_service import SchedulerService, Timing

pytestmark = pytest.mark.django_db

QUIET: dict[str, Any] = {
    "tidy": lambda: None,
    "beat": lambda: None,
}  # inside the test's transaction: keep its connection

SUBMISSION = {
    "name": "svc",
    "department": "vision",
    "cluster": "local",
    "code_url": "https://git.example.com/r.git",
    "command": "python train.py",
    "image": "python",
    "gpus_per_worker": 1,
}


def submit(world, user=None, **fields) -> Job:
    """A submission through the API, as users make them (alice's, in vision, unless ``user``): the job as the 201
    shows it."""
    response = world.api(user or world.alice).post("/api/v1/jobs/", SUBMISSION | fields, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    job = Job.objects.get(pk=body["id"])
    job.status, job.pending_reason, job.status_message = body["status"], body["pending_reason"], body["status_message"]
    return job


@pytest.fixture
def service_mode(settings):
    settings.PORTAL_SCHEDULER = "service"
    return settings


class Clock:
    def __init__(self):
        self.now = timezone.now()

    def __call__(self):
        return self.now


def lease(holder: str, clock: Clock) -> LeaseRow:
    return LeaseRow("scheduler", holder=holder, lease_seconds=5, poll_seconds=0, clock=clock)


def service(*, cycles: int, stop: threading.Event, calls: list, lead=None) -> SchedulerService:
    """A service whose cycle is the real one, counted, that stops itself after ``cycles`` cycles."""

    def cycle():
        calls.append(CycleRequest.objects.count())
        admission.scheduling_cycle()
        if len(calls) >= cycles:
            stop.set()

    return SchedulerService(
        lead=lead or lease("me", Clock()), timing=Timing(delay=0, period=3600, heartbeat=3600), cycle=cycle, **QUIET
    )


def test_a_submission_with_the_service_only_records_a_request(world, service_mode):
    job = submit(world)
    assert job.status == "queued" and job.pending_reason == ""
    assert job.status_message == "Submitted: the scheduler decides within a moment."
    assert list(CycleRequest.objects.values_list("reason", flat=True)) == ["submitted"]
    assert Job.objects.get(pk=job.pk).status == "queued"  # nobody scheduled it


def test_inline_a_submission_is_scheduled_by_the_request_and_records_nothing(world):
    job = submit(world)
    assert job.status == "admitted" and not CycleRequest.objects.exists()


def test_the_leader_runs_one_cycle_for_a_burst_and_deletes_the_requests_it_handled(world, service_mode):
    jobs = [submit(world, name=f"b{i}") for i in range(5)]
    stop, calls = threading.Event(), []
    service(cycles=1, stop=stop, calls=calls).run(stop)
    assert calls == [5]  # one cycle, which saw the five requests
    assert not CycleRequest.objects.exists()
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("status", flat=True)) == {"admitted"}


def test_a_request_recorded_during_a_cycle_waits_for_the_next_one(world, service_mode):
    submit(world, name="first")
    stop, calls = threading.Event(), []
    svc = service(cycles=2, stop=stop, calls=calls)
    real = svc.cycle

    def cycle_with_a_late_request():
        if not calls:
            submit(world, name="late")  # committed while the cycle runs
        real()

    svc.cycle = cycle_with_a_late_request
    svc.run(stop)
    assert len(calls) == 2  # the late request was not deleted with the first: it caused the second cycle
    assert Job.objects.get(name="late").status == "admitted"
    assert not CycleRequest.objects.exists()


def test_a_failed_cycle_keeps_its_requests(world, service_mode):
    submit(world)
    stop, attempts = threading.Event(), []

    def failing():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("database gone")
        admission.scheduling_cycle()
        stop.set()

    SchedulerService(lead=lease("me", Clock()), timing=Timing(delay=0, period=3600), cycle=failing, **QUIET).run(stop)
    assert len(attempts) == 2 and Job.objects.get(name="svc").status == "admitted"


def test_one_lease_holder_at_a_time_and_a_standby_takes_over_once_it_expires(db):
    clock = Clock()
    first, second = lease("first", clock), lease("second", clock)
    assert first.acquire() and not second.acquire()
    clock.now += timedelta(seconds=4)
    assert first.renew() and not second.acquire()  # renewed: 5 s more from now
    clock.now += timedelta(seconds=6)  # the first stopped renewing (killed, frozen)
    assert second.acquire()
    assert not first.renew()  # it wakes up and finds it is not leading any more
    assert Lease.objects.get().holder == "second"
    second.release()
    assert first.acquire()


def test_a_standby_does_not_schedule(world, service_mode):
    clock = Clock()
    assert lease("leader", clock).acquire()
    submit(world)
    stop = threading.Event()
    standby = SchedulerService(
        lead=lease("standby", clock), timing=Timing(delay=0, period=0, retry=0), cycle=stop.set, **QUIET
    )
    tries = []
    real = standby.lead.acquire

    def acquire():
        tries.append(1)
        if len(tries) == 3:
            stop.set()
        return real()

    standby.lead.acquire = acquire
    standby.run(stop)
    assert standby.cycles == 0 and Job.objects.get(name="svc").status == "queued"


def test_the_reconcile_covers_for_a_scheduler_service_that_is_down(world, service_mode):
    submit(world)
    assert admission.periodic_cycle() is not None  # no cycle ever: the reconcile runs one
    assert Job.objects.get(name="svc").status == "admitted"
    submit(world, name="second")
    assert admission.periodic_cycle() is None  # a cycle ran just now: the service's to run
    Heartbeat.objects.filter(name=heartbeats.CYCLE).update(beat_at=timezone.now() - timedelta(seconds=60))
    assert admission.periodic_cycle() is not None
    assert Job.objects.get(name="second").status == "admitted"


# --- arrival cycles: a submission after a cycle that decided nothing is decided alone ----------------------------


def held_gpus() -> list[tuple[str, int]]:
    """Every (node, GPU) a job holds, once per job that holds it."""
    return [
        (slot["node"], gpu)
        for placement in Job.objects.filter(status__in=lifecycle.HOLDS_GPUS).values_list("placement", flat=True)
        for slot in placement
        for gpu in slot["gpus"]
    ]


def a_quiet_pool(world) -> admission.ServiceMemory:
    """The 8-GPU pool: 6 GPUs held by one job, a 4-GPU job waiting; the service's last cycle decided nothing."""
    memory = admission.ServiceMemory()
    submit(world, name="big", gpus_per_worker=6)
    admission.service_cycle(memory, arrivals=None)
    assert Job.objects.get(name="big").status == "admitted"
    submit(world, name="blocked", gpus_per_worker=4)
    decided = admission.service_cycle(memory, arrivals=None)
    assert decided.admissions == [] and memory.scheduler is not None
    return memory


def test_a_submission_after_a_quiet_cycle_is_decided_alone_and_admitted(world, service_mode):
    memory = a_quiet_pool(world)
    small = submit(world, user=world.bob, name="small", department="nlp", gpus_per_worker=2)

    admission.service_cycle(memory, arrivals=[small.pk])

    assert memory.arrival_cycles == 1
    small.refresh_from_db()
    assert small.status == "admitted" and len(small.placement[0]["gpus"]) == 2
    assert Job.objects.get(name="blocked").status == "queued"
    assert len(held_gpus()) == len(set(held_gpus())) == 8


def test_a_submission_that_cannot_start_is_told_why_by_the_arrival_cycle(world, service_mode):
    memory = a_quiet_pool(world)
    late = submit(world, name="late", gpus_per_worker=4)

    admission.service_cycle(memory, arrivals=[late.pk])

    assert memory.arrival_cycles == 1
    late.refresh_from_db()
    assert late.status == "queued" and late.pending_reason and late.status_message
    assert late.queue_position == 2  # behind the job that waited before it


def test_gpus_taken_behind_the_service_s_back_make_the_next_cycle_a_full_one(world, service_mode):
    # Another leader (or anything that wrote without a request) admitted a job into the 2 free GPUs after the
    # service's last cycle: what the service remembers is stale, and an arrival decided on it would be placed on
    # those same GPUs.
    memory = a_quiet_pool(world)
    submit(world, user=world.bob, name="elsewhere", department="nlp", gpus_per_worker=2)
    admission.scheduling_cycle()
    assert Job.objects.get(name="elsewhere").status == "admitted"
    small = submit(world, user=world.bob, name="small", department="nlp", gpus_per_worker=2)

    admission.service_cycle(memory, arrivals=[small.pk])

    assert len(held_gpus()) == len(set(held_gpus())) == 8  # no GPU given twice
    assert Job.objects.get(name="small").status == "queued"
    assert memory.arrival_cycles == 0  # a full cycle read what had changed


def test_the_service_decides_a_submission_alone_after_a_quiet_cycle(world, service_mode):
    stop = threading.Event()
    svc = SchedulerService(lead=lease("me", Clock()), timing=Timing(delay=0, period=0, heartbeat=3600), **QUIET)
    real, seen = svc.cycle, []

    def cycle():
        real()
        seen.append(svc.memory.arrival_cycles)
        if len(seen) == 2:  # the periodic cycle found big running and blocked waiting: nothing decided
            submit(world, user=world.bob, name="small", department="nlp", gpus_per_worker=2)
        if len(seen) == 3:
            stop.set()

    svc.cycle = cycle
    submit(world, name="big", gpus_per_worker=6)
    submit(world, name="blocked", gpus_per_worker=4)
    svc.run(stop)
    # 1: full (it leads; admits big), 2: full (periodic; decides nothing), 3: the submission's, an arrival cycle
    assert seen == [0, 0, 1]
    assert Job.objects.get(name="small").status == "admitted"
    assert Job.objects.get(name="blocked").status == "queued"
    assert not CycleRequest.objects.exists()
