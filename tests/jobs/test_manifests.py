"""Kubernetes manifests of jobs: what each framework becomes, the environment contract in its pods, and the
job options (fractional GPUs, storage, priority, runtime, TensorBoard, reruns, commit, long names).
The validator, the department side, shell safety and render_manifests are in the other test_manifests_*.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

from clusters.k8s import (
    ClusterSettings,
    ManifestError,
)
from jobs.executors.base import Mount
from jobs.executors.manifests import job_manifests
from tests.jobs.manifest_helpers import (
    CONTRACT,
    DEMO,
    FROM_OPERATOR,
    env_of,
    main_container,
    placement,
    pod_specs,
    render,
    spec,
)

# ------------------------------------------------------------------------------------ frameworks

FRAMEWORKS = [
    # framework, workers, apiVersion/kind, replicas, main container name
    ("pytorch", 1, "kubeflow.org/v1/PyTorchJob", {"Master": 1}, "pytorch"),
    ("pytorch", 4, "kubeflow.org/v1/PyTorchJob", {"Master": 1, "Worker": 3}, "pytorch"),
    ("jax", 2, "kubeflow.org/v1/PyTorchJob", {"Master": 1, "Worker": 1}, "pytorch"),
    ("tensorflow", 3, "kubeflow.org/v1/TFJob", {"Worker": 3}, "tensorflow"),
    ("mpi", 2, "kubeflow.org/v2beta1/MPIJob", {"Launcher": 1, "Worker": 2}, None),
    ("python", 1, "batch/v1/Job", None, "main"),
]


@pytest.mark.parametrize(("framework", "workers", "kind", "replicas", "container"), FRAMEWORKS)
def test_it_renders_each_framework_as_its_operators_job(framework, workers, kind, replicas, container):
    manifest = render(spec(framework=framework, workers=workers, gpus_per_worker=2))

    assert f"{manifest['apiVersion']}/{manifest['kind']}" == kind
    assert manifest["metadata"]["name"] == "digits-42-0f3a9c1e"
    assert manifest["metadata"]["namespace"] == "portal-vision"
    if replicas:
        field = next(key for key in manifest["spec"] if key.endswith("ReplicaSpecs"))
        assert {t: r["replicas"] for t, r in manifest["spec"][field].items()} == replicas
    for replica_type, template in pod_specs(manifest).items():
        expected = {
            "portal/job-id": "42-0f3a9c1e",
            "portal/department": "vision",
            "app.kubernetes.io/managed-by": "gpu-portal",
        }
        assert template["metadata"]["labels"] == expected == manifest["metadata"]["labels"]
        main = main_container(template)
        if container:
            assert main["name"] == container
        assert main["image"] == "registry.example.com/gpu-portal/pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"
        assert [c["name"] for c in template["spec"]["initContainers"]] == ["fetch-code", "install-requirements"]
        if replica_type == "Launcher":
            assert "resources" not in main or not main["resources"]
            assert "nodeSelector" not in template["spec"]
        else:
            assert main["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
            assert template["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB"}
        env = env_of(main)
        assert CONTRACT <= set(env) | FROM_OPERATOR[manifest["kind"]]
        assert env["PORTAL_JOB_ID"] == "42-0f3a9c1e"
        assert env["CUDA_VISIBLE_DEVICES"] == ("0,1" if replica_type != "Launcher" else "")


def test_the_environment_matches_the_local_executor_where_the_operator_does_not_set_it():
    tf = main_container(pod_specs(render(spec(framework="tensorflow", workers=2)))["Worker"])
    env = env_of(tf)
    assert env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"] == "digits-42-0f3a9c1e-worker-0"
    assert env["RANK"] == {"fieldRef": {"fieldPath": "metadata.labels['training.kubeflow.org/replica-index']"}}
    assert "TF_CONFIG" not in env  # the TFJob operator writes it

    pytorch = env_of(main_container(pod_specs(render(spec(workers=2)))["Worker"]))
    assert not {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"} & set(pytorch)  # the operator's
    assert pytorch["LOCAL_RANK"] == "0"

    single = env_of(main_container(pod_specs(render(spec(framework="python", gpus_per_worker=0)))["Job"]))
    assert (single["WORLD_SIZE"], single["RANK"], single["CUDA_VISIBLE_DEVICES"]) == ("1", "0", "")
    assert single["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_user_env_cannot_override_the_contract():
    env = env_of(main_container(pod_specs(render(spec(env={"RANK": "7", "LR": "0.1"})))["Master"]))
    assert env["LR"] == "0.1" and "RANK" not in env


# ------------------------------------------------------------------------------- job options


def test_a_fractional_gpu_asks_for_the_shared_gpu_resource_in_its_unit():
    job = spec(framework="python", gpus_per_worker=0.25)
    main = main_container(pod_specs(render(job, gpu_type="T4"))["Job"])
    assert main["resources"] == {"limits": {"aliyun.com/gpu-mem": "4"}}  # a quarter of a 16 GB T4
    assert env_of(main)["PORTAL_GPU_FRACTION"] == "0.25"

    hami = dataclasses.replace(
        DEMO, shared_gpu_resource="nvidia.com/gpumem", shared_gpu_unit="MiB", shared_gpu_with_gpu=True
    )
    assert main_container(pod_specs(render(job, hami, gpu_type="T4"))["Job"])["resources"] == {
        "limits": {"nvidia.com/gpumem": "4096", "nvidia.com/gpu": "1"}
    }


def test_a_fractional_gpu_on_a_cluster_without_gpu_sharing_is_refused():
    with pytest.raises(ManifestError, match="no shared-GPU resource"):
        job = spec(gpus_per_worker=0.5)
        job_manifests(job, placement(job), ClusterSettings(), gpu_type="T4")


def test_storage_is_mounted_from_its_pvc_read_only_when_asked():
    job = spec(
        mounts=(
            Mount("vision-datasets", "/data", "/srv/storage/vision-datasets", read_only=True),
            Mount("scratch", "/scratch", "scratch-pvc"),
        )
    )
    template = pod_specs(render(job))["Master"]
    mounts = {m["mountPath"]: m for m in main_container(template)["volumeMounts"]}
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    data, scratch = mounts["/data"], mounts["/scratch"]
    assert data["readOnly"] is True and scratch["readOnly"] is False
    assert volumes[data["name"]]["persistentVolumeClaim"] == {"claimName": "vision-datasets", "readOnly": True}
    assert volumes[scratch["name"]]["persistentVolumeClaim"] == {"claimName": "scratch-pvc"}
    env = env_of(main_container(template))
    assert (env["PORTAL_DATA_VISION_DATASETS"], env["PORTAL_DATA_SCRATCH"]) == ("/data", "/scratch")


def test_a_local_storage_without_a_pvc_on_the_cluster_is_refused_by_name():
    job = spec(mounts=(Mount("nlp-corpora", "/corpora", "/srv/storage/nlp-corpora"),))
    with pytest.raises(ManifestError, match="Storage nlp-corpora is a local path; cluster k8s-demo needs a PVC"):
        job_manifests(job, placement(job), DEMO, gpu_type="V100")


@pytest.mark.parametrize(("framework", "where"), [("pytorch", ("spec", "runPolicy")), ("python", ("spec",))])
def test_priority_and_max_runtime_reach_the_cluster(framework, where):
    manifest = render(spec(framework=framework, max_runtime_seconds=5400), priority="high")
    holder = manifest
    for key in where:
        holder = holder[key]
    assert holder["activeDeadlineSeconds"] == 5400
    for template in pod_specs(manifest).values():
        assert template["spec"]["priorityClassName"] == "gpu-portal-high"
        assert template["spec"]["terminationGracePeriodSeconds"] == 30
    assert "activeDeadlineSeconds" not in json.dumps(render(spec(framework=framework, max_runtime_seconds=None)))


@pytest.mark.parametrize("tensorboard", [True, False])
def test_tensorboard_logs_go_to_the_job_volume_only_when_a_board_is_wanted(tensorboard):
    template = pod_specs(render(spec(), tensorboard=tensorboard))["Master"]
    main = main_container(template)
    (logs,) = [m for m in main["volumeMounts"] if m["mountPath"] == env_of(main)["TENSORBOARD_LOG_DIR"]]
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == logs["name"])
    if tensorboard:
        assert volume["persistentVolumeClaim"] == {"claimName": "portal-jobs"}
        assert logs["subPath"] == "tensorboard/42/run-0"
    else:
        assert volume == {"name": logs["name"], "emptyDir": {}}


def volume_paths(template: dict) -> dict[str, str]:
    """Mount path -> subPath of the job volume, in the main container."""
    return {m["mountPath"]: m["subPath"] for m in main_container(template)["volumeMounts"] if m["name"] == "job-volume"}


@pytest.mark.parametrize(("framework", "workers", "kind", "replicas", "container"), FRAMEWORKS)
def test_a_rerun_after_preemption_finds_the_checkpoints_and_board_folder_of_its_job(
    framework, workers, kind, replicas, container
):
    first = render(spec(framework=framework, workers=workers))
    rerun = render(spec(framework=framework, workers=workers, job_id="42-77aa01bc", run_index=1))
    for before, after in zip(pod_specs(first).values(), pod_specs(rerun).values(), strict=True):
        env_before, env_after = env_of(main_container(before)), env_of(main_container(after))
        assert (env_before["PORTAL_RUN_INDEX"], env_after["PORTAL_RUN_INDEX"]) == ("0", "1")
        assert "PORTAL_RESUMED" not in env_before and env_after["PORTAL_RESUMED"] == "1"
        assert env_before["PORTAL_CHECKPOINT_DIR"] == env_after["PORTAL_CHECKPOINT_DIR"] == "/portal/checkpoints"
        paths_before, paths_after = volume_paths(before), volume_paths(after)
        assert paths_before["/portal/checkpoints"] == paths_after["/portal/checkpoints"] == "checkpoints/42"
        assert (paths_before[env_before["TENSORBOARD_LOG_DIR"]], paths_after[env_after["TENSORBOARD_LOG_DIR"]]) == (
            "tensorboard/42/run-0",
            "tensorboard/42/run-1",
        )  # one board folder per job, a sub-folder per run
        assert (paths_before[env_before["PORTAL_OUTPUT_DIR"]], paths_after[env_after["PORTAL_OUTPUT_DIR"]]) == (
            "42-0f3a9c1e/output",
            "42-77aa01bc/output",
        )  # output stays per run


def test_a_job_cannot_claim_to_be_resumed_or_move_its_checkpoints():
    env = env_of(
        main_container(
            pod_specs(
                render(
                    spec(
                        env={
                            "PORTAL_RESUMED": "1",
                            "PORTAL_CHECKPOINT_DIR": "/x",
                            "PORTAL_RUN_INDEX": "3",
                            "HOME": "/tmp/me",
                        }
                    )
                )
            )["Master"]
        )
    )
    assert "PORTAL_RESUMED" not in env and env["PORTAL_CHECKPOINT_DIR"] == "/portal/checkpoints"
    assert env["PORTAL_RUN_INDEX"] == "0" and env["HOME"] == "/tmp/me"  # HOME is the job's to choose


def test_the_resolved_commit_wins_over_the_ref():
    fetch = pod_specs(render(spec(code_ref="main"), commit="0123abcd" * 5))["Master"]["spec"]["initContainers"][0]
    assert env_of(fetch)["PORTAL_CODE_REF"] == "0123abcd" * 5


def test_a_long_name_is_shortened_so_pod_names_stay_dns_labels():
    manifest = render(spec(name="a" * 40, job_id="123456-0f3a9c1e", workers=64))
    assert len(manifest["metadata"]["name"]) <= 52
    assert manifest["metadata"]["name"].endswith("-123456-0f3a9c1e")
