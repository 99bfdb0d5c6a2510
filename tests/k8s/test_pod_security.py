"""Every pod the portal renders on a cluster is contained: job replicas of each framework, TensorBoards and
model servers run unprivileged (non-root uid from the cluster settings, RuntimeDefault seccomp, no token,
no privilege escalation, no capabilities, read-only root where the image allows, a writable /tmp where it
is read-only); Kaniko builds get what Kaniko allows. The fake API server accepts all of them."""

from __future__ import annotations

import pytest

from clusters.k8s import ClusterSettings, ManifestError
from clusters.manifest_validation import manifest_problems
from images.manifests import BuildSettings, BuildSpec, job_manifest
from jobs.executors.base import JobSpec, Placement, WorkerPlacement
from jobs.executors.manifests import job_manifests
from serving.backends.manifests import InferenceTarget, ServingSettings, inference_service
from tensorboards.backends_k8s import KubeBoardSpec, board_manifests, job_run

CLUSTER = ClusterSettings.from_cluster("k8s", {"run_as_user": 4242, "run_as_group": 4343})
FRAMEWORKS = [("pytorch", 3), ("jax", 2), ("tensorflow", 2), ("mpi", 2), ("python", 1)]
# What KServe's runtime and TensorBoard write (below) aside, nothing of these needs a writable root.
WRITABLE_ROOT = {"tensorboard"}


def job(framework: str, workers: int) -> JobSpec:
    return JobSpec(
        job_id=f"42-{framework}",
        name="digits",
        department="vision",
        code_url="https://git.example.com/r.git",
        code_ref="main",
        command="python train.py",
        framework=framework,
        image="pytorch/pytorch:2.4.0",
        workers=workers,
        gpus_per_worker=1,
        job_key="42",
    )


def job_pods(framework: str, workers: int) -> list[dict]:
    spec = job(framework, workers)
    (manifest,) = job_manifests(
        spec, Placement(tuple(WorkerPlacement(i, "n") for i in range(workers))), CLUSTER, gpu_type="V100"
    )
    assert manifest_problems(manifest) == []
    if manifest["kind"] == "Job":
        return [manifest["spec"]["template"]["spec"]]
    field = next(key for key in manifest["spec"] if key.endswith("ReplicaSpecs"))
    return [replica["template"]["spec"] for replica in manifest["spec"][field].values()]


def board_pod() -> dict:
    spec = KubeBoardSpec(board_id=5, path_prefix="/tensorboard/5", department="vision", runs=(job_run("digits", "42"),))
    deployment, _ = board_manifests(spec, CLUSTER)
    return deployment["spec"]["template"]["spec"]


def model_server_pod() -> dict:
    """The predictor as KServe turns it into a pod: its fields, with the model as container kserve-container."""
    settings = ServingSettings.from_settings(
        "k8s", {"artifact_uri_prefix": "pvc://models/", "run_as_user": 4242, "run_as_group": 4343}
    )
    target = InferenceTarget(
        server_id=7,
        deployment="churn",
        variant="blue",
        department="vision",
        namespace="portal-vision",
        artifact_uri="store://churn/3/model.joblib",
    )
    manifest = inference_service(target, settings)
    assert manifest_problems(manifest) == []
    predictor = dict(manifest["spec"]["predictor"])
    model = predictor.pop("model")
    return {**predictor, "containers": [{"name": "kserve-container", **model}]}


def every_pod() -> list[tuple[str, dict]]:
    pods = [(f"{framework} job", pod) for framework, workers in FRAMEWORKS for pod in job_pods(framework, workers)]
    return pods + [("TensorBoard", board_pod()), ("model server", model_server_pod())]


@pytest.mark.parametrize(("what", "pod"), every_pod(), ids=lambda value: value if isinstance(value, str) else "")
def test_every_pod_the_portal_renders_runs_unprivileged_as_the_clusters_user(what, pod):
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 4242,
        "runAsGroup": 4343,
        "fsGroup": 4343,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    containers = pod.get("initContainers", []) + pod["containers"]
    assert containers
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    for container in containers:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert context["readOnlyRootFilesystem"] is (container["name"] not in WRITABLE_ROOT), container["name"]
        assert context.get("runAsUser", 4242) == 4242 and context.get("privileged") is None
        if context["readOnlyRootFilesystem"]:  # a read-only root: /tmp and HOME are an emptyDir
            (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert "emptyDir" in volumes[tmp["name"]] and not tmp.get("readOnly")
            env = {item["name"]: item.get("value") for item in container["env"]}
            assert env["HOME"] == env["TMPDIR"] == "/tmp", container["name"]


def test_a_model_server_keeps_its_user_on_the_container_for_knative():
    (container,) = model_server_pod()["containers"]
    assert container["securityContext"]["runAsNonRoot"] is True and container["securityContext"]["runAsUser"] == 4242
    assert container["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_a_kaniko_build_gets_what_kaniko_allows():
    build = BuildSettings.from_settings("k8s", {"build_registry": "registry.example.com/portal"})
    manifest = job_manifest(
        BuildSpec(build_id=7, name="img", department="vision", tag="t", dockerfile="FROM x\n"), build, CLUSTER
    )
    assert manifest_problems(manifest) == []
    pod = manifest["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"}
    }  # root: Kaniko unpacks images as root
    (kaniko,) = pod["containers"]
    context = kaniko["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["capabilities"]["drop"] == ["ALL"]
    assert not {"SYS_ADMIN", "NET_ADMIN", "NET_RAW", "SYS_PTRACE", "MKNOD", "SYS_CHROOT"} & set(
        context["capabilities"]["add"]
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"run_as_user": 0}, "run_as_user must be a uid/gid from 1"),
        ({"run_as_group": -1}, "run_as_group must be a uid/gid from 1"),
    ],
)
def test_a_cluster_cannot_make_pods_run_as_root(values, message):
    with pytest.raises(ManifestError, match=message):
        ClusterSettings.from_cluster("k8s", values)
    with pytest.raises(ManifestError, match=message):
        ServingSettings.from_settings("k8s", values)
    with pytest.raises(ManifestError, match="setting run_as_user must be an integer"):
        ClusterSettings.from_cluster("k8s", {"run_as_user": "1000"})


def test_the_fake_api_server_accepts_every_contained_pod(kube, kube_api):
    kube_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "portal-vision"}})
    for framework, workers in FRAMEWORKS:
        spec = job(framework, workers)
        for manifest in job_manifests(
            spec, Placement(tuple(WorkerPlacement(i, "n") for i in range(workers))), CLUSTER, gpu_type="V100"
        ):
            assert kube_api.create(manifest)[1]
    spec = KubeBoardSpec(board_id=5, path_prefix="/tensorboard/5", department="vision", runs=(job_run("digits", "42"),))
    for manifest in board_manifests(spec, CLUSTER):
        assert kube_api.create(manifest)[1]
