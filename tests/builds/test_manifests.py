"""The Kaniko Job and its context as the API server would see them, and what a build's Job and pods say."""

import pytest

from clusters.k8s import ClusterSettings
from clusters.manifest_validation import manifest_problems
from images.manifests import BuildSettings, BuildSetupError, BuildSpec, context_config_map, job_manifest
from images.observe import BUILDING, FAILED, QUEUED, SUCCEEDED, failure_message, observe

CLUSTER = ClusterSettings.from_cluster("k8s", {})
SETTINGS = {"build_registry": "registry.example.com/portal", "build_push_secret": "registry-push"}
PASTED = BuildSpec(
    build_id=7,
    name="torch-audio",
    department="vision",
    tag="build-7",
    dockerfile="FROM pytorch/pytorch:2.4.0\nRUN pip install torchaudio\n",
)
GIT = BuildSpec(
    build_id=8,
    name="jax-tools",
    department="nlp",
    tag="build-8",
    code_url="https://git.example.com/team/images.git",
    code_ref="main",
    dockerfile_path="Dockerfile.gpu",
    context_path="jax",
)


def container(manifest):
    return manifest["spec"]["template"]["spec"]["containers"][0]


def test_it_builds_a_pasted_dockerfile_from_a_config_map():
    build = BuildSettings.from_settings("k8s", SETTINGS)
    job = job_manifest(PASTED, build, CLUSTER)
    config_map = context_config_map(PASTED, CLUSTER, job_uid="uid-1")
    assert manifest_problems(job) == [] and manifest_problems(config_map) == []
    assert config_map["data"] == {"Dockerfile": PASTED.dockerfile}
    kaniko = container(job)
    assert kaniko["image"].startswith("gcr.io/kaniko-project/executor:v")
    assert "command" not in kaniko  # the image's entrypoint, argv only: no shell
    assert "--context=dir:///workspace" in kaniko["args"]
    assert "--destination=registry.example.com/portal/vision/torch-audio:build-7" in kaniko["args"]
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["context"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert volumes["docker-config"]["secret"]["secretName"] == "registry-push"
    assert {"name": "docker-config", "mountPath": "/kaniko/.docker", "readOnly": True} in kaniko["volumeMounts"]
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] >= 60
    assert job["metadata"]["namespace"] == "portal-vision"
    assert job["metadata"]["labels"] == {
        "portal/build-id": "7",
        "portal/department": "vision",
        "app.kubernetes.io/managed-by": "gpu-portal",
        "app.kubernetes.io/component": "image-build",
    }


def test_it_builds_a_repository_through_kanikos_git_context():
    job = job_manifest(GIT, BuildSettings.from_settings("k8s", SETTINGS), CLUSTER)
    assert manifest_problems(job) == []
    args = container(job)["args"]
    assert "--context=git://git.example.com/team/images.git#refs/heads/main" in args
    assert "--dockerfile=Dockerfile.gpu" in args and "--context-sub-path=jax" in args
    assert "context" not in {v["name"] for v in job["spec"]["template"]["spec"]["volumes"]}


@pytest.mark.parametrize(
    ("ref", "context"),
    [
        ("", "git://git.example.com/team/images.git"),
        ("refs/tags/v1", "git://git.example.com/team/images.git#refs/tags/v1"),
        (
            "0123456789abcdef0123456789abcdef01234567",
            "git://git.example.com/team/images.git#0123456789abcdef0123456789abcdef01234567",
        ),
    ],
)
def test_it_pins_branches_tags_and_commits(ref, context):
    spec = BuildSpec(**{**GIT.__dict__, "code_ref": ref})
    job = job_manifest(spec, BuildSettings.from_settings("k8s", SETTINGS), CLUSTER)
    assert f"--context={context}" in container(job)["args"]
    assert manifest_problems(job) == []


def test_it_says_what_is_missing_in_the_cluster_settings():
    with pytest.raises(BuildSetupError, match="Cluster k8s has no registry to push built images to.*build_registry"):
        BuildSettings.from_settings("k8s", {})
    with pytest.raises(BuildSetupError, match="build_deadline_seconds must be an integer"):
        BuildSettings.from_settings("k8s", {**SETTINGS, "build_deadline_seconds": "1h"})


def pod(phase, state=None, name="image-build-pod"):
    statuses = [{"name": "kaniko", "state": state}] if state else []
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"phase": phase, "containerStatuses": statuses},
    }


def test_it_reads_the_phase_from_the_job_and_its_pod():
    digest = "sha256:" + "a" * 64
    assert observe({}, []).phase == QUEUED
    assert observe({}, [pod("Pending", {"waiting": {"reason": "ContainerCreating"}})]).phase == QUEUED
    assert observe({}, [pod("Running", {"running": {}})]).phase == BUILDING
    done = observe(
        {"status": {"conditions": [{"type": "Complete", "status": "True"}]}},
        [pod("Succeeded", {"terminated": {"exitCode": 0, "message": digest}})],
    )
    assert (done.phase, done.digest) == (SUCCEEDED, digest)
    late = observe(
        {
            "status": {
                "conditions": [
                    {"type": "Failed", "status": "True", "message": "Job was active longer than specified deadline"}
                ]
            }
        },
        [],
    )
    assert (late.phase, late.message) == (FAILED, "Kubernetes: Job was active longer than specified deadline.")
    assert observe(None, []).phase == FAILED


def test_it_explains_a_failure_with_the_last_log_lines():
    failed = observe({}, [pod("Failed", {"terminated": {"exitCode": 1}})])
    log = "".join(f"line {n}\n" for n in range(100)) + "error building image: RUN pip install nope: exit 1\n"
    message = failure_message(failed, log)
    assert message.startswith("Kaniko exited with code 1.\n")
    assert message.endswith("error building image: RUN pip install nope: exit 1")
    assert "line 80" not in message and "line 99" in message
