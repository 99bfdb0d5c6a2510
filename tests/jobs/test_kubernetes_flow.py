"""A job through the portal on a Kubernetes cluster: the same services as on the local cluster, with only the
cluster's backend setting changed (issue 7's "done when"). The cluster is KubeFake (tests/k8s/kfake.py)
whose simulated operator the test moves; the portal sees only the API, through the real client.
"""

from __future__ import annotations

import pytest

from clusters.models import Cluster
from core.celery import TransientError
from jobs import executor_specs, lifecycle, running
from jobs.executors.k8s_names import resource_name
from jobs.models import Job

NS = "portal-vision"
SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def cluster(world, kube, monkeypatch):
    monkeypatch.setattr(running, "LAUNCH_WATCH_SECONDS", 0)  # the test moves the operator itself
    cluster = Cluster.objects.get(name="local")
    cluster.backend, cluster.settings = Cluster.Backend.KUBERNETES, {"kube_url": kube.url}
    cluster.save()
    return cluster


def submit(world, **fields) -> Job:
    body = {
        "name": "resnet",
        "department": "vision",
        "code_url": "https://git.example.com/vision/resnet.git",
        "command": "python train.py",
        "image": "pytorch",
        "workers": 2,
        "gpus_per_worker": 2,
    } | fields
    response = world.api(world.alice).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def in_use(world) -> int:
    return world.api(world.alice).get("/api/v1/departments/vision/").json()["usage"][0]["in_use"]


def test_a_job_runs_on_the_cluster_and_its_gpus_are_released_when_it_ends(world, kube, cluster):
    job = submit(world)
    assert job.status == lifecycle.ADMITTED and in_use(world) == 4

    running.job_launch(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == lifecycle.STARTING
    name = resource_name(executor_specs.job_spec(job))
    created = kube.get("kubeflow.org/v1", "PyTorchJob", NS, name)
    assert created["metadata"]["labels"]["portal/job-id"] == job.run_id
    assert kube.get("v1", "Namespace", None, NS) and kube.get("v1", "PersistentVolumeClaim", NS, "portal-jobs")

    running.job_launch(job_id=job.pk)  # a retried task: nothing more is created
    assert len(kube.list("kubeflow.org/v1", "PyTorchJob", NS)) == 1

    pods = kube.operator.create_pods("PyTorchJob", NS, name)
    for pod in pods:
        kube.operator.run(NS, pod, fetch_log=f"[portal] code at commit {SHA}\n", log="epoch 1\n")
    kube.operator.set_condition("PyTorchJob", NS, name, "Running")
    running.jobs_reconcile()
    job.refresh_from_db()
    assert (job.status, job.commit) == (lifecycle.RUNNING, SHA)

    logs = world.api(world.alice).get(f"/api/v1/jobs/{job.pk}/logs/?worker=1")
    assert logs.status_code == 200 and "epoch 1" in logs.content.decode()

    for pod in pods:
        kube.operator.exit(NS, pod, 0)
    kube.operator.succeed("PyTorchJob", NS, name)
    running.jobs_reconcile()
    job.refresh_from_db()
    assert job.status == lifecycle.SUCCEEDED and in_use(world) == 0


def test_a_cancelled_job_is_deleted_from_the_cluster_and_ends_cancelled(world, kube, cluster):
    job = submit(world)
    running.job_launch(job_id=job.pk)
    name = resource_name(executor_specs.job_spec(job))
    for pod in kube.operator.create_pods("PyTorchJob", NS, name):
        kube.operator.run(NS, pod)
    kube.operator.set_condition("PyTorchJob", NS, name, "Running")
    running.jobs_reconcile()

    response = world.api(world.alice).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 200
    running.job_stop_on_executor(job_id=job.pk)  # the cancel task
    assert kube.get("kubeflow.org/v1", "PyTorchJob", NS, name) is None
    assert kube.list("v1", "Pod", NS) == []  # foreground deletion took the pods with it

    running.jobs_reconcile()
    job.refresh_from_db()
    assert job.status == lifecycle.CANCELLED and in_use(world) == 0
    assert job.events.order_by("-pk").first().reason == "cancelled"


def test_a_cluster_that_cannot_be_reached_leaves_the_job_admitted_for_a_retry(world, kube, cluster):
    job = submit(world)
    fault = kube.inject(status=503, times=100, method="POST")
    with pytest.raises(TransientError, match="injected fault"):  # Celery retries the task later
        running.job_launch(job_id=job.pk)
    assert fault.hits > 1  # retried before giving up to the task's own retry
    job.refresh_from_db()
    assert job.status == lifecycle.ADMITTED and job.launched_at is None

    fault.times = 0
    running.job_launch(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == lifecycle.STARTING
    assert len(kube.list("kubeflow.org/v1", "PyTorchJob", NS)) == 1


def test_garbage_of_jobs_the_portal_no_longer_knows_is_removed(world, kube, cluster):
    job = submit(world)
    running.job_launch(job_id=job.pk)
    orphan = {**kube.list("kubeflow.org/v1", "PyTorchJob", NS)[0]}
    orphan["metadata"] = {
        "name": "gone-1",
        "namespace": NS,
        "labels": {**orphan["metadata"]["labels"], "portal/job-id": "999-deadbeef"},
    }
    orphan.pop("status", None)
    kube.seed(orphan)

    assert running.jobs_collect_garbage() == {"local": ["999-deadbeef"]}
    assert [o["metadata"]["labels"]["portal/job-id"] for o in kube.list("kubeflow.org/v1", "PyTorchJob", NS)] == [
        job.run_id
    ]
