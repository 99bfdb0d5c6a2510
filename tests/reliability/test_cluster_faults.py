"""Cluster API faults (500, 503, 409 after a create that landed, timeouts that did and did not land) injected at
random into the Kubernetes fake while jobs are launched, run, cancelled, observed and collected: every job
ends where it should, each run has exactly one object on the cluster while it exists, and nothing is left
behind (no orphans).

The portal's tasks are called the way Celery calls them: a TransientError is retried (here at once).
Seeded: a failure prints the seed and the faults that hit.
"""

from __future__ import annotations

import json
import os
import random

import pytest

from clusters import services as cluster_services
from clusters.kube import Kube
from clusters.models import Cluster
from core.celery import TransientError
from jobs import executor_specs, lifecycle, running
from jobs.executors.k8s_names import kind_for, resource_name
from jobs.models import Job

NS = "portal-vision"
JOBS = 12
SEED = int(os.environ.get("PORTAL_CHAOS_SEED", "7"))


def as_celery(task, *, attempts: int = 25, **kwargs):
    """Run a task, retrying TransientError like Celery's autoretry would (without the countdown)."""
    for _ in range(attempts):
        try:
            return task(**kwargs)
        except TransientError:
            continue
    raise AssertionError(f"{task.__name__}{kwargs} still failing after {attempts} attempts")


@pytest.fixture
def cluster(world, kube, monkeypatch):
    monkeypatch.setattr(running, "LAUNCH_WATCH_SECONDS", 0)
    cluster = Cluster.objects.get(name="local")
    cluster.backend, cluster.settings = Cluster.Backend.KUBERNETES, {"kube_url": kube.url}
    cluster.save()
    # The portal's client for this cluster, with a short timeout (a delayed answer is a timeout) and no waits.
    kube_api = Kube(kube.api_client(), retries=3, backoff_seconds=0, timeout_seconds=0.5, sleep=lambda _: None)
    monkeypatch.setitem(
        cluster_services._kube_clients, cluster.pk, (json.dumps(cluster.settings, sort_keys=True), kube_api)
    )
    yield cluster
    kube_api.close()


def test_faults_on_the_cluster_api_lose_nothing_and_leave_nothing_behind(world, kube, cluster):
    rng = random.Random(SEED)
    faults = []

    def chaos():
        """Before each portal step, maybe arm a fault for its next requests."""
        if rng.random() < 0.6:
            kind = rng.choice(["500", "503", "timeout", "landed-timeout", "409"])
            method = rng.choice(["POST", "GET", "DELETE", "PATCH", None])
            if kind == "timeout":
                faults.append(kube.inject(None, times=1, method=method, delay=1.0))
            elif kind == "landed-timeout":
                faults.append(kube.inject(None, times=1, method=method, delay=1.0, land=True))
            elif kind == "409":
                faults.append(kube.inject(409, times=1, method="PATCH", message="the object has been modified"))
            else:
                faults.append(kube.inject(int(kind), times=rng.randint(1, 2), method=method))

    # The two nastiest cases for sure: a create that landed although the client timed out (the retry meets
    # 409 and must take the existing object), and a create that timed out and did not land.
    faults.append(kube.inject(None, times=1, method="POST", path_contains="pytorchjobs", delay=1.0, land=True))
    faults.append(kube.inject(None, times=1, method="POST", path_contains="pytorchjobs", delay=1.0))
    client = world.api(world.alice)
    ids = []
    for index in range(JOBS):
        response = client.post(
            "/api/v1/jobs/",
            {
                "name": f"faulty-{index}",
                "department": "vision",
                "code_url": "https://git.example.com/r.git",
                "command": "python train.py",
                "image": "pytorch",
                "gpus_per_worker": 1,
                "workers": rng.choice([1, 2]),
            },
            format="json",
        )
        assert response.status_code == 201, response.json()
        ids.append(response.json()["id"])
    cancelled = set(rng.sample(ids, 4))

    def step():
        """One round of what the worker and beat do, each task under fire."""
        for job in Job.objects.filter(status=lifecycle.ADMITTED, launched_at__isnull=True):
            chaos()
            as_celery(running.job_launch, job_id=job.pk)
        for job in Job.objects.filter(status__in=lifecycle.HOLDS_GPUS, cancel_requested_at__isnull=False):
            chaos()
            as_celery(running.job_stop_on_executor, job_id=job.pk)
        chaos()
        as_celery(running.jobs_reconcile)

    def run_pods(job: Job) -> None:
        spec = executor_specs.job_spec(job)
        kind, name = kind_for(spec), resource_name(spec)
        if kube.get(*{"Job": ("batch/v1", "Job")}.get(kind, ("kubeflow.org/v1", kind)), NS, name) is None:
            return
        for pod in kube.operator.create_pods(kind, NS, name):
            kube.operator.run(NS, pod)
        kube.operator.set_condition(kind, NS, name, "Running")
        if job.pk not in cancelled:
            for pod in kube.operator.pods(kind, NS, name):
                kube.operator.exit(NS, pod, 0)
            kube.operator.succeed(kind, NS, name)

    for _ in range(40):
        step()
        for job in Job.objects.filter(status=lifecycle.STARTING):
            run_pods(job)
        for pk in cancelled:
            job = Job.objects.get(pk=pk)
            if job.status not in lifecycle.FINAL and job.cancel_requested_at is None:
                assert client.post(f"/api/v1/jobs/{pk}/cancel/").status_code == 200
        if not Job.objects.exclude(status__in=lifecycle.FINAL).exists():
            break
        # While jobs run, each run has at most one object on the cluster.
        names = [
            o["metadata"]["labels"]["portal/job-id"]
            for kind in ("PyTorchJob",)
            for o in kube.list("kubeflow.org/v1", kind, NS)
        ] + [o["metadata"]["labels"]["portal/job-id"] for o in kube.list("batch/v1", "Job", NS)]
        assert len(names) == len(set(names)), names

    hits = [(f.status, f.method, f.delay, f.land, f.hits) for f in faults if f.hits]
    context = f"seed {SEED}, faults that hit: {hits}\n" + "\n".join(
        f"{job.pk} {job.status} {job.status_message!r}" for job in Job.objects.order_by("pk")
    )
    assert len(hits) >= 5 and {(f.delay, f.land) for f in faults if f.hits} >= {(1.0, True), (1.0, False)}, context
    jobs = {job.pk: job for job in Job.objects.all()}
    assert sorted(jobs) == sorted(ids), context
    for pk, job in jobs.items():
        assert job.status == (lifecycle.CANCELLED if pk in cancelled else lifecycle.SUCCEEDED), context
        assert "Waiting" not in job.status_message, context  # an ended job does not say it waits

    # Nothing of a cancelled job is left; finished jobs keep their objects (their pods hold the logs) until
    # the portal forgets them, and then the garbage collection removes them.
    cancelled_runs = {jobs[pk].run_id for pk in cancelled}
    left = {
        o["metadata"]["labels"]["portal/job-id"]
        for api, kind in (("kubeflow.org/v1", "PyTorchJob"), ("batch/v1", "Job"))
        for o in kube.list(api, kind, NS)
    }
    assert not left & cancelled_runs, context
    Job.objects.all().delete()
    as_celery(running.jobs_collect_garbage)
    assert kube.list("kubeflow.org/v1", "PyTorchJob", NS) == [] and kube.list("batch/v1", "Job", NS) == []
    assert kube.list("v1", "Pod", NS) == [], context  # foreground deletion took the pods too
