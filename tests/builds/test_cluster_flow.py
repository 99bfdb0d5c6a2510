"""Image builds on a cluster: the real kubernetes client against the API fake (tests/k8s/kfake.py), whose
simulated Job controller and kubelet the tests move: submit -> Job -> pod running -> image in the catalogue."""

from clusters.models import Cluster
from images import services
from images.models import FrameworkImage, ImageBuild
from tests.builds.conftest import DOCKERFILE, REGISTRY
from tests.jobs.executor_harness import wait_for

NS = "portal-vision"
DIGEST = "sha256:" + "3" * 64


def submit(world, user=None, **fields):
    body = {
        "name": "torch-audio",
        "department": "vision",
        "dockerfile": DOCKERFILE,
        "framework": "pytorch",
        "base_packages": ["torch==2.4.0", "torchaudio==2.4.0"],
        **fields,
    }
    response = world.api(user or world.alice).post("/api/v1/image-builds/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def job_name(build) -> str:
    return f"build-{build['id']}-{build['name']}"


def read(world, build, user=None):
    return world.api(user or world.alice).get(f"/api/v1/image-builds/{build['id']}/").json()


def start_pod(kube, build, log="") -> str:
    (pod,) = kube.operator.create_pods("Job", NS, job_name(build))
    kube.operator.run(NS, pod, log=log)
    return pod


def test_a_build_becomes_a_catalogue_image_of_its_department_once(world, kube_cluster, kube):
    build = submit(world)
    services.builds_reconcile()
    job = kube.get("batch/v1", "Job", NS, job_name(build))
    config_map = kube.get("v1", "ConfigMap", NS, job_name(build))
    assert config_map["data"] == {"Dockerfile": DOCKERFILE}
    assert config_map["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert read(world, build)["status"] == "queued"
    assert read(world, build)["destination"] == f"{REGISTRY}/vision/torch-audio:build-{build['id']}"

    pod = start_pod(kube, build, log="INFO[0000] Retrieving image manifest pytorch/pytorch:2.4.0-cuda12.1\n")
    services.builds_reconcile()
    assert read(world, build)["status"] == "building"
    logs = world.api(world.alice).get(build["logs_url"])
    assert logs.content.decode() == "INFO[0000] Retrieving image manifest pytorch/pytorch:2.4.0-cuda12.1\n"

    kube.operator.exit(NS, pod, 0, log="INFO[0042] Pushed registry.example.com/portal/vision/torch-audio\n")
    ended = kube.get("v1", "Pod", NS, pod)
    ended["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = DIGEST
    kube.update(ended, status=True)
    kube.operator.succeed("Job", NS, job_name(build))
    services.builds_reconcile()
    services.builds_reconcile()  # a second tick (or a retried task) changes nothing
    done = read(world, build)
    assert (done["status"], done["image"], done["message"]) == (
        "succeeded",
        "torch-audio",
        "Added to the catalogue as torch-audio.",
    )
    image = FrameworkImage.objects.get(name="torch-audio")
    assert (image.image, image.department.slug, image.official, image.framework, image.base_packages) == (
        f"{REGISTRY}/vision/torch-audio:build-{build['id']}@{DIGEST}",
        "vision",
        False,
        "pytorch",
        ["torch==2.4.0", "torchaudio==2.4.0"],
    )
    services.build_succeed(build=ImageBuild.objects.get(pk=build["id"]), digest=DIGEST)
    assert FrameworkImage.objects.filter(name="torch-audio").count() == 1

    assert "torch-audio" in [i["name"] for i in world.api(world.alice).get("/api/v1/images/").json()["results"]]
    assert "torch-audio" not in [i["name"] for i in world.api(world.bob).get("/api/v1/images/").json()["results"]]
    job = {
        "name": "audio",
        "code_url": "https://git.example.com/team/repo.git",
        "command": "python train.py",
        "image": "torch-audio",
    }
    assert (
        world.api(world.alice).post("/api/v1/jobs/", {**job, "department": "vision"}, format="json").status_code == 201
    )
    refused = world.api(world.bob).post("/api/v1/jobs/", {**job, "department": "nlp"}, format="json")
    assert refused.status_code == 400
    assert refused.json()["image"][0].startswith("No image called 'torch-audio' in the catalogue")


def test_a_failed_build_shows_the_end_of_its_log(world, kube_cluster, kube):
    build = submit(world)
    services.builds_reconcile()
    pod = start_pod(kube, build, log="INFO[0000] Unpacking rootfs\n")
    services.builds_reconcile()
    kube.operator.exit(
        NS,
        pod,
        1,
        log="INFO[0010] RUN pip install torchaudio==2.4.0\n"
        "ERROR: No matching distribution found for torchaudio==2.4.0\n"
        "error building image: error building stage: exit status 1\n",
    )
    kube.operator.fail("Job", NS, job_name(build))
    services.builds_reconcile()
    failed = read(world, build)
    assert failed["status"] == "failed"
    assert failed["message"].splitlines()[0] == "Kubernetes: Job has reached the specified backoff limit."
    assert failed["message"].splitlines()[-2:] == [
        "ERROR: No matching distribution found for torchaudio==2.4.0",
        "error building image: error building stage: exit status 1",
    ]
    assert failed["image"] is None and not FrameworkImage.objects.filter(name="torch-audio").exists()
    # the name is free again for a corrected build
    assert submit(world)["status"] == "queued"


def test_a_build_from_a_repository_runs_kanikos_git_context(world, kube_cluster, kube):
    build = submit(
        world,
        dockerfile="",
        code_url="https://git.example.com/vision/images.git",
        code_ref="v2-branch",
        context_path="audio",
    )
    services.builds_reconcile()
    job = kube.get("batch/v1", "Job", NS, job_name(build))
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--context=git://git.example.com/vision/images.git#refs/heads/v2-branch" in args
    assert "--context-sub-path=audio" in args
    assert kube.get("v1", "ConfigMap", NS, job_name(build)) is None


def test_cancel_deletes_the_job(world, kube_cluster, kube):
    build = submit(world)
    services.builds_reconcile()
    start_pod(kube, build)
    services.builds_reconcile()
    response = world.api(world.carol).post(f"/api/v1/image-builds/{build['id']}/cancel/")
    assert (response.status_code, response.json()["status"]) == (200, "cancelled")
    wait_for(lambda: kube.get("batch/v1", "Job", NS, job_name(build)) is None, timeout=5, what="the Job to be deleted")
    assert kube.list("v1", "Pod", NS, labels=f"portal/build-id={build['id']}") == []
    assert not ImageBuild.objects.get(pk=build["id"]).cleanup_pending
    services.builds_reconcile()
    assert read(world, build)["status"] == "cancelled"


def test_a_cancel_the_cluster_refuses_is_finished_by_the_reconcile(world, kube_cluster, kube):
    build = submit(world)
    services.builds_reconcile()
    kube.inject(status=503, times=1, method="DELETE")
    assert world.api(world.alice).post(f"/api/v1/image-builds/{build['id']}/cancel/").json()["status"] == "cancelled"
    assert kube.get("batch/v1", "Job", NS, job_name(build)) is not None
    services.builds_reconcile()
    assert kube.get("batch/v1", "Job", NS, job_name(build)) is None


def test_a_500_from_the_api_is_retried_without_a_second_job(world, kube_cluster, kube):
    build = submit(world)
    fault = kube.inject(status=500, times=1, method="POST", path_contains="/jobs")
    assert services.builds_reconcile()["errors"] == 1
    assert (fault.hits, read(world, build)["status"], read(world, build)["launched_at"]) == (1, "queued", None)
    assert services.builds_reconcile()["launched"] == 1
    assert len(kube.list("batch/v1", "Job", NS, labels=f"portal/build-id={build['id']}")) == 1
    assert read(world, build)["launched_at"] is not None


def test_a_create_that_landed_after_a_timeout_is_not_repeated(world, kube_cluster, kube, monkeypatch):
    monkeypatch.setattr(services, "KUBE_OPTIONS", {"retries": 0, "timeout_seconds": 0.5})
    build = submit(world)
    kube.inject(status=None, delay=1.5, land=True, method="POST", path_contains="/jobs")
    assert services.builds_reconcile()["errors"] == 1
    wait_for(lambda: kube.get("batch/v1", "Job", NS, job_name(build)), timeout=5, what="the late Job to land")
    assert services.builds_reconcile()["launched"] == 1
    assert len(kube.list("batch/v1", "Job", NS, labels=f"portal/build-id={build['id']}")) == 1
    assert kube.get("v1", "ConfigMap", NS, job_name(build)) is not None


def test_a_log_the_cluster_cannot_serve_is_a_503_with_the_reason(world, kube_cluster, kube):
    build = submit(world)
    services.builds_reconcile()
    kube.inject(status=503, times=1, method="GET", path_contains="/pods")
    response = world.api(world.alice).get(build["logs_url"])
    assert response.status_code == 503
    assert response.json()["detail"].startswith("Cannot read the build's log from cluster k8s:")


def test_a_build_on_a_cluster_that_went_away_waits_saying_so_and_goes_on_when_it_is_back(
    world, kube_cluster, kube, caplog
):
    build = submit(world)
    # The cluster's check found it unreachable after the build was accepted (clusters.services stores it).
    kube_cluster.health, kube_cluster.health_reason = Cluster.Health.UNREACHABLE, "api_unanswered"
    kube_cluster.save(update_fields=["health", "health_reason"])
    caplog.set_level("WARNING", logger="images")

    for _ in range(3):
        services.builds_reconcile()

    waiting = read(world, build)
    assert waiting["status"] == "queued", "a cluster that went away fails no build"
    assert waiting["message"].startswith("Waiting for cluster k8s, which is unreachable (the API server does not")
    assert kube.list("batch/v1", "Job", NS) == [], "nothing was sent to the cluster"
    assert [r for r in caplog.records if r.name.startswith("images")] == [], "no warning per tick"

    kube_cluster.health = Cluster.Health.REACHABLE
    kube_cluster.save(update_fields=["health"])
    services.builds_reconcile()
    assert kube.get("batch/v1", "Job", NS, job_name(build))["metadata"]["name"] == job_name(build)


def test_a_cluster_without_the_training_operator_still_takes_image_builds(world, kube_cluster, kube):
    kube_cluster.health, kube_cluster.health_reason = Cluster.Health.NOT_READY, "operator_missing"
    kube_cluster.save(update_fields=["health", "health_reason"])
    build = submit(world)  # accepted: Kaniko runs as a plain batch Job
    services.builds_reconcile()
    assert kube.get("batch/v1", "Job", NS, job_name(build))["metadata"]["name"] == job_name(build)
