"""Clusters that cannot be reached take no jobs: submissions (API and form) and image builds are refused at once
with the cluster's message, queued jobs for it wait saying why, and a job holding GPUs on a cluster that became
unreachable says so and, after PORTAL_CLUSTER_GRACE_SECONDS, goes back to the queue (its GPUs released, one
job row, its old run removed from the cluster when it is back). The clock is injected: no sleeps."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import Department
from clusters import health
from clusters.models import Cluster, GpuPool
from demo.data import demo_load
from jobs import executor_specs, lifecycle, running
from jobs.executors.k8s_names import resource_name
from jobs.models import Job
from jobs.usage import pool_allocated
from quotas.models import Quota
from tests.frontend.researcher_helpers import field_html, form_as_browser_sends_it, signed_in

NS = "portal-vision"
GRACE = 120
BODY = {
    "name": "resnet",
    "department": "vision",
    "code_url": "https://git.example.com/vision/resnet.git",
    "command": "python train.py",
    "image": "pytorch",
    "workers": 1,
    "gpus_per_worker": 2,
}


@pytest.fixture(autouse=True)
def _no_default_connection(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture
def demo(world, tmp_path):
    """The world with the demo's k8s-demo (rendering-only, quotas for both departments)."""
    demo_load(data_root=tmp_path, pools=[], password=None, with_kubernetes=True)  # passwords stay the world's
    return world


@pytest.fixture
def lab(world, kube, monkeypatch, settings):
    """A Kubernetes cluster served by the API fake, with vision's quota on it."""
    monkeypatch.setattr(running, "LAUNCH_WATCH_SECONDS", 0)
    settings.PORTAL_CLUSTER_GRACE_SECONDS = GRACE
    cluster = Cluster.objects.create(name="lab", backend=Cluster.Backend.KUBERNETES, settings={"kube_url": kube.url})
    pool = GpuPool.objects.create(cluster=cluster, gpu_type="A100", nodes=1, gpus_per_node=4)
    Quota.objects.create(department=Department.objects.get(slug="vision"), pool=pool, nominal=4)
    return cluster


# --- refused at once ---------------------------------------------------------------------


def test_the_api_refuses_a_job_for_an_unreachable_cluster_naming_the_cluster_field(demo):
    response = demo.api(demo.alice).post("/api/v1/jobs/", BODY | {"cluster": "k8s-demo"}, format="json")
    assert response.status_code == 400
    assert response.json()["cluster"] == [
        "Cluster k8s-demo is unreachable (a rendering-only example, no cluster behind it): it takes no jobs now. "
        "A rendering-only example with no cluster behind it: its manifests can be previewed "
        "(manage.py render_manifests), and no job or build runs there."
    ]
    Cluster.objects.create(name="prod", backend=Cluster.Backend.KUBERNETES)
    response = demo.api(demo.alice).post("/api/v1/jobs/", BODY | {"cluster": "prod"}, format="json")
    assert response.json()["cluster"][0].startswith("Cluster prod is unreachable (no connection settings)")
    assert Job.objects.count() == 0


def test_a_job_naming_no_cluster_goes_to_one_that_takes_jobs(demo):
    spare = Cluster.objects.create(name="spare", backend=Cluster.Backend.LOCAL)
    pool = GpuPool.objects.create(cluster=spare, gpu_type="sim", nodes=1, gpus_per_node=8)
    Quota.objects.create(department=Department.objects.get(slug="vision"), pool=pool, nominal=4)
    Cluster.objects.filter(name="local").update(settings={"rendering_only": True})  # the default takes no jobs
    response = demo.api(demo.alice).post("/api/v1/jobs/", BODY | {"image": "python"}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["cluster"] == "spare"  # not local (the default), not k8s-demo: the next that can


def test_the_api_lists_each_clusters_health(demo):
    clusters = {c["name"]: c for c in demo.api(demo.bob).get("/api/v1/clusters/").json()["results"]}
    assert (clusters["k8s-demo"]["health"], clusters["k8s-demo"]["health_reason"]) == ("unreachable", "rendering_only")


def test_the_submit_form_shows_the_cluster_disabled_and_refuses_it_beside_the_field(client, demo):
    signed_in(client, demo.alice)
    page = client.get("/jobs/new/")
    html = page.content.decode()
    assert (
        '<option value="k8s-demo" disabled>k8s-demo (rendering-only example: its manifests can be previewed, '
        "nothing runs there)</option>" in field_html(html, "cluster")
    )
    assert page.context["form"]["cluster"].value() == "local"  # the default is one that takes jobs
    data = form_as_browser_sends_it(page) | {
        "name": "resnet",
        "code_url": "https://git.example.com/vision/resnet.git",
        "command": "python train.py",
        "cluster": "k8s-demo",  # a page loaded before it went away, or a hand-made request
        "gpu_type": "V100",
    }
    response = client.post("/jobs/new/", data)
    assert response.status_code == 200 and Job.objects.count() == 0
    assert "Cluster k8s-demo is unreachable (a rendering-only example" in field_html(
        response.content.decode(), "cluster"
    )


def test_image_builds_to_an_unreachable_cluster_are_refused_and_the_form_says_why(client, demo):
    response = demo.api(demo.alice).post(
        "/api/v1/image-builds/",
        {"name": "audio", "department": "vision", "cluster": "k8s-demo", "dockerfile": "FROM python:3.11\n"},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["cluster"][0].startswith(
        "Cluster k8s-demo is unreachable (a rendering-only example, no cluster behind it): it takes no image builds"
    )
    html = signed_in(client, demo.alice).get("/images/").content.decode()
    assert '<option value="k8s-demo" disabled>k8s-demo (rendering-only example' in html


def test_render_manifests_still_previews_a_rendering_only_cluster(demo):
    from jobs.submission import check_submission

    values = BODY | {"cluster": "k8s-demo", "gpu_type": "V100", "requirements": [], "mounts": [], "env": {}}
    clean = check_submission(user=demo.alice, data=values | {"tensorboard": False}, cluster_health=False)
    assert clean.cluster.name == "k8s-demo"


# --- a cluster that goes away under its jobs ----------------------------------------------


def submit(world, **fields) -> Job:
    response = world.api(world.alice).post("/api/v1/jobs/", BODY | {"cluster": "lab"} | fields, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def test_a_job_on_a_cluster_that_became_unreachable_says_so_then_goes_back_to_the_queue(world, kube, lab, caplog):
    job = submit(world)
    running.job_launch(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == lifecycle.STARTING
    first_run = job.run_id
    name = resource_name(executor_specs.job_spec(job))
    assert kube.get("kubeflow.org/v1", "PyTorchJob", NS, name) is not None

    caplog.set_level(logging.INFO)
    fault = kube.inject(status=503, times=10**6)  # the API server stops answering
    start = timezone.now()
    down_at = start + timedelta(seconds=health.CHECK_EVERY_SECONDS)  # the next check finds it
    for tick in range(0, GRACE, 2):  # the reconcile every 2 s within the grace period
        running.jobs_reconcile(now=down_at + timedelta(seconds=tick))
    job.refresh_from_db()
    assert job.status == lifecycle.STARTING  # within the grace period it keeps its GPUs
    assert job.status_message.startswith("Cluster lab is unreachable (the API server does not answer).")
    assert f"Unless it is back by {down_at + timedelta(seconds=GRACE):%H:%M:%S} UTC" in job.status_message
    assert pool_allocated().get(job.pool_id) == 2

    running.jobs_reconcile(now=down_at + timedelta(seconds=GRACE))
    job.refresh_from_db()
    assert (job.status, job.pending_reason) == (lifecycle.QUEUED, "cluster_unreachable")
    assert job.status_message.startswith("Cluster lab is unreachable (the API server does not answer)")
    assert job.run_id == "" and job.admitted_at is None
    assert pool_allocated().get(job.pool_id, 0) == 0  # its quota is free again
    preempted = job.events.filter(to_status=lifecycle.PREEMPTED).get()
    assert preempted.reason == "cluster_unreachable"
    assert f"its cluster lab stayed unusable for {GRACE} s" in preempted.message

    lines = [r.getMessage() for r in caplog.records if r.name == "clusters.services"]
    assert lines == ["cluster lab: unreachable: The API server does not answer: GET /version: injected fault"], (
        "one line for the change, not one per tick"
    )
    assert not any(record.exc_info for record in caplog.records), "no traceback per tick"

    fault.times = 0  # back: the old run is removed before the job is admitted again
    back = down_at + timedelta(seconds=GRACE + health.CHECK_EVERY_SECONDS)
    running.jobs_reconcile(now=back)
    assert kube.get("kubeflow.org/v1", "PyTorchJob", NS, name) is None
    job.refresh_from_db()
    assert job.status == lifecycle.ADMITTED and job.run_id not in ("", first_run)
    assert Job.objects.count() == 1
    assert [r.getMessage() for r in caplog.records if r.name == "clusters.services"][-1] == (
        "cluster lab: reachable again (was unreachable)"
    )


def test_a_job_being_cancelled_on_an_unreachable_cluster_ends_cancelled_after_the_grace_period(world, kube, lab):
    job = submit(world)
    running.job_launch(job_id=job.pk)
    kube.inject(status=503, times=10**6)
    start = timezone.now() + timedelta(seconds=health.CHECK_EVERY_SECONDS)
    running.jobs_reconcile(now=start)
    assert world.api(world.alice).post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    running.job_stop_on_executor(job_id=job.pk)  # the cancel task: nothing to reach, no traceback
    running.jobs_reconcile(now=start + timedelta(seconds=GRACE))
    job.refresh_from_db()
    assert job.status == lifecycle.CANCELLED and job.run_id == ""
    assert pool_allocated().get(job.pool_id, 0) == 0


def test_queued_jobs_wait_for_an_unusable_cluster_with_the_reason(world, kube, lab):
    job = submit(world)
    assert job.status == lifecycle.ADMITTED
    blocked = submit(world, name="second", gpus_per_worker=2)
    assert blocked.status == lifecycle.ADMITTED  # room for both
    Job.objects.filter(pk__in=[job.pk, blocked.pk]).update(status=lifecycle.CANCELLED)
    Cluster.objects.filter(pk=lab.pk).update(settings={})  # its connection settings removed
    waiting = Job.objects.create(
        **{
            field: getattr(blocked, field)
            for field in ("name", "department", "cluster", "pool", "code_url", "command", "image", "priority")
        },
        submitted_by=world.alice,
        workers=1,
        gpus_per_worker=1,
    )
    from jobs import admission

    admission.scheduling_cycle()
    waiting.refresh_from_db()
    assert (waiting.status, waiting.pending_reason) == (lifecycle.QUEUED, "cluster_unreachable")
    assert waiting.status_message.startswith("Cluster lab is unreachable (no connection settings)")
