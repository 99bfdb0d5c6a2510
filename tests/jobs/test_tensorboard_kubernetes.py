"""TensorBoard on Kubernetes: a Deployment + Service per board reading the jobs' subPaths of the
department's job volume, driven through the real `kubernetes` client against the API fake
(tests/k8s/kfake.py), which validates both objects. Tests play the Deployment controller by writing
the status it would write.
"""

from __future__ import annotations

import pytest

from accounts.models import Department
from clusters.k8s import ClusterSettings
from clusters.manifest_validation import manifest_problems
from clusters.models import Cluster, GpuPool
from core.errors import Conflict
from images.models import FrameworkImage
from jobs.models import Job
from quotas.models import PriorityClass, Quota
from tensorboards import services as boards
from tensorboards.backends import BoardError
from tensorboards.backends_k8s import KubeBoardSpec, KubernetesBoardBackend, board_manifests
from tensorboards.models import TensorBoard

NAMESPACE = "portal-vision"
CLUSTER = ClusterSettings(cluster="gpu1", job_volume_pvc="portal-jobs")
SPEC = KubeBoardSpec(
    board_id=5,
    path_prefix="/tensorboard/12",
    department="vision",
    runs=(("resnet-12-ab12", "12-ab12/tensorboard"), ("resnet-13-cd34", "13-cd34/tensorboard")),
)


def deployment_becomes_available(kube, name: str, *, available: int = 1) -> None:
    obj = kube.get("apps/v1", "Deployment", NAMESPACE, name)
    obj["status"] = {
        "observedGeneration": obj["metadata"]["generation"],
        "replicas": 1,
        "availableReplicas": available,
        "readyReplicas": available,
    }
    kube.update(obj, status=True)


@pytest.fixture
def namespace(kube):
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return NAMESPACE


# --- the builder -----------------------------------------------------------------------------------


def test_it_builds_a_valid_deployment_and_service_reading_the_runs_read_only():
    deployment, service = board_manifests(SPEC, CLUSTER, image="registry.example.com/tensorboard:2.18")
    assert manifest_problems(deployment) == [] and manifest_problems(service) == []
    assert deployment["metadata"]["namespace"] == service["metadata"]["namespace"] == NAMESPACE
    assert deployment["metadata"]["labels"]["portal/tensorboard"] == "5"
    assert deployment["metadata"]["labels"]["portal/department"] == "vision"
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "registry.example.com/tensorboard:2.18"
    assert container["args"][:2] == [
        "--logdir_spec",
        "resnet-12-ab12:/runs/resnet-12-ab12,resnet-13-cd34:/runs/resnet-13-cd34",
    ]
    assert ["--path_prefix", "/tensorboard/12"] == container["args"][2:4] and "--bind_all" in container["args"]
    assert [(m["mountPath"], m["subPath"], m["readOnly"]) for m in container["volumeMounts"]] == [
        ("/runs/resnet-12-ab12", "12-ab12/tensorboard", True),
        ("/runs/resnet-13-cd34", "13-cd34/tensorboard", True),
    ]
    assert pod["volumes"] == [{"name": "job-volume", "persistentVolumeClaim": {"claimName": "portal-jobs"}}]
    assert container["readinessProbe"]["httpGet"]["path"] == "/tensorboard/12/"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"] == {"portal/tensorboard": "5"}


def test_it_refuses_run_paths_that_would_leave_the_job_volume_folder():
    with pytest.raises(BoardError, match="cannot be shown"):
        board_manifests(
            KubeBoardSpec(
                board_id=1, path_prefix="/tensorboard/1", department="vision", runs=(("x", "../other-dept/secret"),)
            ),
            CLUSTER,
        )


# --- the backend through the real client ------------------------------------------------------------


def test_start_creates_both_ready_when_available_stop_removes_both(kube_api, kube, namespace):
    backend = KubernetesBoardBackend(kube_api, CLUSTER)
    process = backend.start(SPEC)
    assert backend.start(SPEC) == process  # idempotent: 409 means it is there
    assert process.host == "tensorboard-5.portal-vision.svc.cluster.local" and process.port == 80
    created = kube.get("apps/v1", "Deployment", NAMESPACE, "tensorboard-5")
    assert [m["subPath"] for m in created["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]] == [
        "12-ab12/tensorboard",
        "13-cd34/tensorboard",
    ]
    assert kube.get("v1", "Service", NAMESPACE, "tensorboard-5")["spec"]["ports"][0]["targetPort"] == 6006

    assert backend.alive(process) and not backend.ready(process)
    deployment_becomes_available(kube, "tensorboard-5", available=0)
    assert not backend.ready(process)
    deployment_becomes_available(kube, "tensorboard-5")
    assert backend.ready(process)

    backend.stop(process)
    assert kube.get("apps/v1", "Deployment", NAMESPACE, "tensorboard-5") is None
    assert kube.get("v1", "Service", NAMESPACE, "tensorboard-5") is None
    assert not backend.alive(process)


def test_sync_runs_gives_the_deployment_a_new_run(kube_api, kube, namespace):
    backend = KubernetesBoardBackend(kube_api, CLUSTER)
    backend.start(KubeBoardSpec(board_id=5, path_prefix="/tensorboard/12", department="vision", runs=SPEC.runs[:1]))
    backend.sync_runs(SPEC)
    mounts = kube.get("apps/v1", "Deployment", NAMESPACE, "tensorboard-5")["spec"]["template"]["spec"]["containers"][0][
        "volumeMounts"
    ]
    assert [m["subPath"] for m in mounts] == ["12-ab12/tensorboard", "13-cd34/tensorboard"]
    generation = kube.get("apps/v1", "Deployment", NAMESPACE, "tensorboard-5")["metadata"]["generation"]
    backend.sync_runs(SPEC)  # unchanged: not rolled again
    assert kube.get("apps/v1", "Deployment", NAMESPACE, "tensorboard-5")["metadata"]["generation"] == generation


def test_a_deployment_that_cannot_roll_out_is_not_alive(kube_api, kube, namespace):
    backend = KubernetesBoardBackend(kube_api, CLUSTER)
    process = backend.start(SPEC)
    obj = kube.get("apps/v1", "Deployment", NAMESPACE, "tensorboard-5")
    obj["status"] = {"conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}
    kube.update(obj, status=True)
    assert not backend.alive(process)


# --- through tensorboards.services --------------------------------------------------------------------------------


@pytest.fixture
def k8s_jobs(world, settings, tmp_path, kube, namespace):
    settings.PORTAL_DATA_ROOT = tmp_path / "portal"
    cluster = Cluster.objects.create(name="gpu1", backend=Cluster.Backend.KUBERNETES, settings={"kube_url": kube.url})
    pool = GpuPool.objects.create(cluster=cluster, gpu_type="A100", nodes=1, gpus_per_node=8)
    vision, nlp = Department.objects.get(slug="vision"), Department.objects.get(slug="nlp")
    for department in (vision, nlp):
        Quota.objects.create(department=department, pool=pool, nominal=4)

    def job(name: str, run_id: str, department=vision, user=None) -> Job:
        return Job.objects.create(
            name=name,
            department=department,
            cluster=cluster,
            pool=pool,
            submitted_by=user or world.alice,
            code_url="https://git.example.com/team/repo.git",
            command="python train.py",
            image=FrameworkImage.objects.first(),
            priority=PriorityClass.objects.first(),
            run_id=run_id,
            status=Job.Status.RUNNING,
        )

    world.job = job
    return world


def test_a_kubernetes_jobs_board_goes_running_and_stops(k8s_jobs, kube):
    job = k8s_jobs.job("resnet", "41-ab12")
    board = boards.board_start_for_job(user=k8s_jobs.alice, job=job)
    assert board.status == TensorBoard.Status.STARTING
    name = f"tensorboard-{board.pk}"
    assert board.host == f"{name}.{NAMESPACE}.svc.cluster.local" and board.port == 80  # what the proxy calls
    container = kube.get("apps/v1", "Deployment", NAMESPACE, name)["spec"]["template"]["spec"]["containers"][0]
    # One folder per job (its runs are its sub-folders run-0, run-1 ...), whichever run is current.
    assert [m["subPath"] for m in container["volumeMounts"]] == [f"tensorboard/{job.storage_key}"]
    assert ["--path_prefix", f"/tensorboard/{job.pk}"] == container["args"][2:4]

    assert boards.board_observe(board=board).status == TensorBoard.Status.STARTING
    deployment_becomes_available(kube, name)
    assert boards.board_observe(board=board).status == TensorBoard.Status.RUNNING

    boards.board_stop(board=board)
    assert board.status == TensorBoard.Status.STOPPED
    assert (
        kube.get("apps/v1", "Deployment", NAMESPACE, name) is None
        and kube.get("v1", "Service", NAMESPACE, name) is None
    )


def test_jobs_of_two_departments_cannot_share_a_cluster_board(k8s_jobs):
    from django.contrib.auth import get_user_model

    ours = k8s_jobs.job("a", "51-aa")
    theirs = k8s_jobs.job("b", "52-bb", department=Department.objects.get(slug="nlp"), user=k8s_jobs.bob)
    admin = get_user_model().objects.get(username="admin")  # sees both departments
    with pytest.raises(Conflict, match="same department"):
        boards.board_start_compare(user=admin, job_ids=[ours.pk, theirs.pk])
