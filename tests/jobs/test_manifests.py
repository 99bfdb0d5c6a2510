"""Kubernetes manifests of jobs: what each framework becomes, that every rendered manifest passes the
official schemas (closed) and the operators' webhook rules, that the validator catches typos, that
nothing from a job reaches a shell string, and the render_manifests command."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import subprocess

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from clusters.inventory import SIMULATED
from clusters.k8s import (
    ClusterSettings,
    ManifestError,
    department_gpu_limit,
    department_manifests,
    priority_class_manifests,
)
from clusters.manifest_validation import ManifestInvalid, check_manifests, manifest_problems
from demo.data import K8S_DEMO_POOLS, K8S_DEMO_SETTINGS, demo_load
from jobs.executors.base import JobSpec, Mount, Placement, WorkerPlacement
from jobs.executors.manifests import FETCH_SCRIPT, INSTALL_SCRIPT, job_manifests
from jobs.management.commands.render_manifests import Command as RenderManifests

DEMO = ClusterSettings.from_cluster(
    "k8s-demo", K8S_DEMO_SETTINGS, [(t, memory) for t, _, _, memory, _ in K8S_DEMO_POOLS]
)
CONTRACT = {
    "PORTAL_JOB_ID",
    "PORTAL_JOB_NAME",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
    "TENSORBOARD_LOG_DIR",
    "PORTAL_OUTPUT_DIR",
}
# What the operators put into the pods themselves (manifests.py docstring).
FROM_OPERATOR = {
    "PyTorchJob": {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"},
    "TFJob": {"TF_CONFIG"},
    # Not the operator's: an MPI program's rank and peers come from mpirun (OMPI_COMM_WORLD_RANK ...).
    "MPIJob": {"RANK", "MASTER_ADDR", "MASTER_PORT"},
    "Job": set(),
}


def spec(**fields) -> JobSpec:
    defaults = dict(
        job_id="42-0f3a9c1e",
        name="digits",
        department="vision",
        code_url="https://git.example.com/team/repo.git",
        code_ref="main",
        command="python train.py --epochs 3",
        framework="pytorch",
        image="pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
        requirements=("numpy==2.4.6",),
        workers=1,
        gpus_per_worker=1,
        max_runtime_seconds=3600,
        job_key="42",
    )
    return JobSpec(**{**defaults, **fields})


def placement(job: JobSpec) -> Placement:
    return Placement(tuple(WorkerPlacement(worker=i, node=f"node-{i}", gpus=(0,)) for i in range(job.workers)))


def render(job: JobSpec, cluster: ClusterSettings = DEMO, **options) -> dict:
    options.setdefault("gpu_type", "V100")
    (manifest,) = job_manifests(job, placement(job), cluster, **options)
    assert manifest_problems(manifest) == []
    return manifest


def pod_specs(manifest: dict) -> dict[str, dict]:
    """Replica type (or "Job") -> pod template."""
    spec = manifest["spec"]
    if manifest["kind"] == "Job":
        return {"Job": spec["template"]}
    field = next(key for key in spec if key.endswith("ReplicaSpecs"))
    return {kind: replica["template"] for kind, replica in spec[field].items()}


def main_container(template: dict) -> dict:
    return template["spec"]["containers"][0]


def env_of(container: dict) -> dict[str, str | dict]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


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


def test_department_namespace_quota_volume_and_priority_classes_validate():
    manifests = department_manifests("vision", 32, DEMO) + priority_class_manifests(
        [("high", 1000, False), ("low", 100, True)], DEMO
    )
    check_manifests(manifests)
    namespace, quota, volume, _, high, low = manifests
    assert namespace["metadata"] == {
        "name": "portal-vision",
        "labels": {"portal/department": "vision", "app.kubernetes.io/managed-by": "gpu-portal"},
    }
    assert quota["spec"] == {"hard": {"requests.nvidia.com/gpu": "32"}}
    assert volume["metadata"]["name"] == "portal-jobs" and volume["spec"]["accessModes"] == ["ReadWriteMany"]
    assert (high["metadata"]["name"], high["value"], high["preemptionPolicy"]) == ("gpu-portal-high", 1000, "Never")
    assert "preemptible" in low["description"]


# --------------------------------------------------------------------------------- the validator


def problems_after(change) -> list[str]:
    manifest = json.loads(json.dumps(render(spec(workers=2))))
    change(manifest)
    return manifest_problems(manifest)


def master(manifest) -> dict:
    return manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


def test_it_rejects_an_unknown_field_in_a_container_by_name_and_place():
    problems = problems_after(lambda m: main_container({"spec": master(m)}).update(imagePullPolicyy="Always"))
    assert len(problems) == 1
    assert problems[0].startswith(
        "PyTorchJob digits-42-0f3a9c1e: spec.pytorchReplicaSpecs.Master.template.spec.containers[0]: "
        "unknown field 'imagePullPolicyy' (known: args, command, env,"
    )


def test_it_rejects_typos_anywhere_in_the_spec():
    assert "spec: unknown field 'pytorchReplicaSpec'" in " ".join(
        problems_after(lambda m: m["spec"].update(pytorchReplicaSpec={}))
    )
    assert "unknown field 'activeDeadline'" in " ".join(
        problems_after(lambda m: m["spec"]["runPolicy"].update(activeDeadline=3))
    )
    assert "is not of type 'integer'" in " ".join(
        problems_after(lambda m: m["spec"]["runPolicy"].update(backoffLimit="0"))
    )
    assert "unknown field 'lables'" in " ".join(
        problems_after(lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"].update(lables={}))
    )


def test_it_keeps_open_what_kubernetes_keeps_open():
    def quantities(m):
        main_container({"spec": master(m)})["resources"] = {
            "limits": {"cpu": 4, "memory": "16Gi", "example.com/fpga": "1"}
        }

    assert problems_after(quantities) == []


def test_it_rejects_what_the_operators_webhooks_reject():
    def rename(m):
        main_container({"spec": master(m)})["name"] = "trainer"

    assert "the PyTorchJob operator runs the container named 'pytorch'; found 'trainer'" in " ".join(
        problems_after(rename)
    )

    def two_masters(m):
        m["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2

    assert "spec.pytorchReplicaSpecs.Master.replicas: must be 1 (is 2)" in " ".join(problems_after(two_masters))

    def chief(m):
        m["spec"]["pytorchReplicaSpecs"]["Chief"] = m["spec"]["pytorchReplicaSpecs"]["Worker"]

    assert "spec.pytorchReplicaSpecs.Chief: unknown replica type (use Master, Worker)" in " ".join(
        problems_after(chief)
    )

    tf = json.loads(json.dumps(render(spec(framework="tensorflow"))))
    tf["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "pytorch"
    assert any("named 'tensorflow'" in problem for problem in manifest_problems(tf))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Digits-1", "must be a DNS-1035 label"),
        ("1-digits", "must be a DNS-1035 label"),
        ("d" * 60, "too long: its pods would be called"),
    ],
)
def test_it_rejects_bad_names(name, message):
    problems = problems_after(lambda m: m["metadata"].update(name=name))
    assert any(message in problem for problem in problems), problems


def test_it_rejects_bad_labels():
    problems = problems_after(lambda m: m["metadata"]["labels"].update({"portal/job-id": "-bad value-", "a/b/c": "x"}))
    assert any("portal/job-id: value '-bad value-'" in problem for problem in problems)
    assert any("key 'a/b/c'" in problem for problem in problems)


def test_core_kinds_are_validated_strictly():
    job = json.loads(json.dumps(render(spec(framework="python"))))
    job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    (problem,) = manifest_problems(job)
    assert (
        problem.startswith("Job digits-42-0f3a9c1e: spec.template.spec.containers[0]:")
        and "imagePullPolicyy" in problem
    )

    quota = department_manifests("vision", 8, DEMO)[1]
    quota["spec"]["hardd"] = quota["spec"].pop("hard")
    assert "hardd" in " ".join(manifest_problems(quota))
    with pytest.raises(ManifestInvalid, match="Namespace Portal_Vision: metadata.name"):
        check_manifests([{**department_manifests("vision", 8, DEMO)[0], "metadata": {"name": "Portal_Vision"}}])


# ------------------------------------------------------------------------------ no shell injection

EVIL_URL = "https://git.example.com/$(touch pwned-url)`touch pwned-tick`.git"
EVIL_REF = "main;touch pwned-ref"
EVIL_REQUIREMENT = "numpy; touch pwned-req"


def strings_in(node, path=""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from strings_in(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from strings_in(value, f"{path}[{index}]")
    elif isinstance(node, str):
        yield path, node


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mpi", "python"])
def test_the_code_url_ref_and_requirements_are_only_ever_values_never_shell_text(framework):
    manifest = render(spec(framework=framework, code_url=EVIL_URL, code_ref=EVIL_REF, requirements=(EVIL_REQUIREMENT,)))
    places = {
        text: [path for path, value in strings_in(manifest) if text in value]
        for text in (EVIL_URL, EVIL_REF, EVIL_REQUIREMENT)
    }
    for template in pod_specs(manifest).values():
        fetch, install = template["spec"]["initContainers"]
        assert fetch["command"] == ["sh", "-c", FETCH_SCRIPT] and install["command"][:4] == [
            "sh",
            "-c",
            INSTALL_SCRIPT,
            "install-requirements",
        ]
    assert places[EVIL_URL] and all(p.endswith("initContainers[0].env[0].value") for p in places[EVIL_URL])
    assert places[EVIL_REF] and all(p.endswith("initContainers[0].env[1].value") for p in places[EVIL_REF])
    assert places[EVIL_REQUIREMENT] and all(
        p.endswith("initContainers[1].command[4]") for p in places[EVIL_REQUIREMENT]
    )


def test_the_fetch_script_runs_what_it_is_given_as_data(tmp_path):
    repo = tmp_path / "repo$(touch pwned-url)"
    subprocess.run(["git", "init", "--quiet", "--initial-branch=main", str(repo)], check=True)
    (repo / "train.py").write_text("print('hi')\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "x"], check=True)
    fetch = pod_specs(render(spec(code_url=str(repo), code_ref=EVIL_REF)))["Master"]["spec"]["initContainers"][0]
    env = {
        **env_of(fetch),
        "PORTAL_CODE_DIR": str(tmp_path / "code"),
        "GIT_ALLOW_PROTOCOL": "file",
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
    }
    result = subprocess.run(fetch["command"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode != 0 and "main;touch pwned-ref" in result.stderr  # git: no such ref, said verbatim
    assert (tmp_path / "code" / "train.py").exists()  # the odd URL was cloned as the path it is
    assert not list(tmp_path.glob("pwned*")) and not list((tmp_path / "code").glob("pwned*"))


# ------------------------------------------------------------------------------ render_manifests

BODY = {
    "name": "digits",
    "department": "vision",
    "cluster": "k8s-demo",
    "code_url": "https://git.example.com/team/repo.git",
    "code_ref": "main",
    "command": "python train.py",
    "image": "pytorch",
    "workers": 2,
    "gpus_per_worker": 4,
    "gpu_type": "V100",
    "priority": "high",
    "mounts": [{"storage": "vision-datasets", "path": "/data", "read_only": True}],
    "max_runtime_seconds": 7200,
    "id": "42-0f3a9c1e",
}


@pytest.fixture
def k8s_world(world, tmp_path):
    demo_load(data_root=tmp_path, pools=[SIMULATED], password=world.password, with_kubernetes=True)
    return world


def run_cli(tmp_path, body, *args) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(body) if not isinstance(body, str) else body)
    out = io.StringIO()
    call_command("render_manifests", "--spec", str(path), *args, stdout=out)
    return out.getvalue()


def test_render_manifests_prints_yaml_that_validates(k8s_world, tmp_path):
    documents = list(yaml.safe_load_all(run_cli(tmp_path, BODY)))
    check_manifests(documents)
    (job,) = documents
    assert (job["kind"], job["metadata"]["name"], job["metadata"]["namespace"]) == (
        "PyTorchJob",
        "digits-42-0f3a9c1e",
        "portal-vision",
    )
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == 7200
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert template["spec"]["priorityClassName"] == "gpu-portal-high"
    assert main_container(template)["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    data = next(m for m in main_container(template)["volumeMounts"] if m["mountPath"] == "/data")
    assert data["readOnly"] is True


def test_render_manifests_renders_a_fractional_t4_job_and_the_department(k8s_world, tmp_path):
    body = {
        **BODY,
        "image": "python",
        "workers": 1,
        "gpus_per_worker": 0.5,
        "gpu_type": "T4",
        "mounts": [],
        "placement": [{"worker": 0, "node": "k8s-demo-t4-0", "gpus": [1], "gpu_fraction": 0.5}],
    }
    documents = list(yaml.safe_load_all(run_cli(tmp_path, body, "--with-department")))
    check_manifests(documents)
    assert [d["kind"] for d in documents] == [
        "Namespace",
        "ResourceQuota",
        "PersistentVolumeClaim",
        "NetworkPolicy",
        "PriorityClass",
        "PriorityClass",
        "PriorityClass",
        "Job",
    ]
    # vision may borrow without limit: the guard is both whole pools (32 V100 + 32 T4), not its 16 + 16 nominal
    assert documents[1]["spec"]["hard"] == {"requests.nvidia.com/gpu": "64"}
    assert main_container(documents[-1]["spec"]["template"])["resources"] == {"limits": {"aliyun.com/gpu-mem": "8"}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({k: v for k, v in BODY.items() if k != "id"}, 'The spec needs "id"'),
        ({**BODY, "workers": 0, "gpu_type": "A100"}, "workers: Use between 1 and 64 workers."),
        ({**BODY, "gpus": 2}, "gpus: Unknown field; did you mean 'gpus_per_worker'?"),
        ({**BODY, "mounts": [{"storage": "nlp-corpora", "path": "/c"}]}, "vision has no storage called 'nlp-corpora'"),
        ({**BODY, "placement": [{"worker": 0, "node": "n", "gpus": [0]}]}, "one slot for each of the 2 workers"),
        ("{not json", "is not JSON"),
    ],
)
def test_render_manifests_refuses_a_bad_spec_with_a_message(k8s_world, tmp_path, body, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        run_cli(tmp_path, body)


def test_render_manifests_exits_non_zero_on_a_bad_spec(k8s_world, tmp_path, capsys):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({**BODY, "cluster": "nowhere"}))
    with pytest.raises(SystemExit) as exit_:
        RenderManifests().run_from_argv(["manage.py", "render_manifests", "--spec", str(path)])
    assert exit_.value.code == 1
    assert "cluster: No cluster called 'nowhere'" in capsys.readouterr().err


def test_a_job_id_that_cannot_be_a_label_is_refused():
    job = spec(job_id="../etc")
    with pytest.raises(ManifestError, match="cannot label Kubernetes objects"):
        job_manifests(job, placement(job), DEMO, gpu_type="V100")


def test_validation_needs_no_network(monkeypatch):
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("the validator tried to reach the network")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    check_manifests(
        [*department_manifests("nlp", 4, DEMO), render(spec(framework="python")), render(spec(framework="mpi"))]
    )


@pytest.mark.parametrize("repo_requirements", [True, False])
def test_the_install_script_hands_each_requirement_to_pip_as_one_argument(tmp_path, repo_requirements):
    # A stand-in for the image's python that records how pip was called.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$PIP_ARGS"\n')
    (bin_dir / "python").chmod(0o755)
    code = tmp_path / "code"
    code.mkdir()
    if repo_requirements:
        (code / "requirements.txt").write_text("scipy\n")
    install = pod_specs(render(spec(requirements=(EVIL_REQUIREMENT, "pandas>=2"))))["Master"]["spec"]["initContainers"][
        1
    ]
    env = {
        **env_of(install),
        "PORTAL_CODE_DIR": str(code),
        "PORTAL_PACKAGES_DIR": str(tmp_path / "packages"),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PIP_ARGS": str(tmp_path / "pip-args"),
    }
    subprocess.run(install["command"], env=env, cwd=tmp_path, check=True)
    args = (tmp_path / "pip-args").read_text().splitlines()
    reading = ["-r", str(code / "requirements.txt")] if repo_requirements else []
    assert args == [
        "-m",
        "pip",
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "--target",
        str(tmp_path / "packages"),
        *reading,
        "--",
        EVIL_REQUIREMENT,
        "pandas>=2",
    ]
    assert not list(tmp_path.glob("pwned*"))


def test_the_install_script_does_nothing_without_requirements(tmp_path):
    (tmp_path / "code").mkdir()
    install = pod_specs(render(spec(requirements=())))["Master"]["spec"]["initContainers"][1]
    env = {
        **env_of(install),
        "PORTAL_CODE_DIR": str(tmp_path / "code"),
        "PORTAL_PACKAGES_DIR": str(tmp_path / "p"),
        "PATH": "/nonexistent:/usr/bin:/bin",
    }
    result = subprocess.run(install["command"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_render_manifests_falls_back_to_kubernetes_defaults_for_what_a_cluster_leaves_unset(k8s_world, tmp_path):
    body = {**BODY, "cluster": "local", "gpu_type": "sim", "workers": 1, "gpus_per_worker": 1, "mounts": []}
    err = io.StringIO()
    path = tmp_path / "local.json"
    path.write_text(json.dumps(body))
    out = io.StringIO()
    call_command("render_manifests", "--spec", str(path), stdout=out, stderr=err)
    (job,) = yaml.safe_load_all(out.getvalue())
    check_manifests([job])
    master_pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert master_pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "sim"}
    assert main_container(master_pod)["image"] == "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"
    assert "cluster local uses the local backend" in err.getvalue()


def test_cluster_settings_with_a_bad_value_are_refused_by_name():
    with pytest.raises(ManifestError, match="shared_gpu_unit must be one of GiB, MiB, percent"):
        ClusterSettings.from_cluster("k8s", {"shared_gpu_unit": "GB"})
    with pytest.raises(ManifestError, match="setting backoff_limit must be an integer"):
        ClusterSettings.from_cluster("k8s", {"backoff_limit": "0"})
    with pytest.raises(ManifestError, match="setting storage_pvcs must be an object"):
        ClusterSettings.from_cluster("k8s", {"storage_pvcs": ["vision-datasets"]})
    assert ClusterSettings.from_cluster("k8s", {"kubeconfig_context": "prod"}) == ClusterSettings(cluster="k8s")


def test_the_gpu_guard_of_a_namespace_is_what_the_department_may_hold_not_its_nominal():
    # (nominal, borrowing_limit, pool size): borrowing adds up to the pool, unlimited borrowing is the pool
    assert department_gpu_limit([(8, 0, 32)]) == 8
    assert department_gpu_limit([(8, 4, 32), (2, None, 16)]) == 12 + 16
    assert department_gpu_limit([(30, 10, 32)]) == 32
    assert department_gpu_limit([]) == 0


# ------------------------------------------------------------------------- the department's fence


def test_a_departments_pods_reach_each_other_dns_and_the_outside_but_not_the_cluster_inside():
    policy = next(m for m in department_manifests("vision", 8, DEMO) if m["kind"] == "NetworkPolicy")
    assert manifest_problems(policy) == []
    assert policy["metadata"]["namespace"] == "portal-vision" and policy["spec"]["podSelector"] == {}
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    same_namespace, dns, outside = policy["spec"]["egress"]
    assert same_namespace == {"to": [{"podSelector": {}}]}
    assert {"protocol": "UDP", "port": 53} in dns["ports"] and {"protocol": "TCP", "port": 53} in dns["ports"]
    assert dns["to"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
    (anywhere,) = outside["to"]
    assert "ports" not in outside and anywhere["ipBlock"]["cidr"] == "0.0.0.0/0"
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(anywhere["ipBlock"]["except"])
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["from"] == [
        {"podSelector": {}},  # nothing else of the cluster: not another department
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gpu-portal"}}},
    ]


def test_the_fence_follows_the_clusters_networks_and_the_portals_namespace():
    cluster = ClusterSettings.from_cluster(
        "k8s",
        {
            "internal_cidrs": ["10.244.0.0/16", "fd00::/8"],
            "portal_namespace": "portal-system",
            "ingress_namespaces": ["knative-serving"],
        },
    )
    policy = next(m for m in department_manifests("nlp", 0, cluster) if m["kind"] == "NetworkPolicy")
    assert manifest_problems(policy) == []
    assert policy["spec"]["egress"][2]["to"] == [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00::/8"]}},
    ]
    assert [peer.get("namespaceSelector", {}).get("matchLabels") for peer in policy["spec"]["ingress"][0]["from"]] == [
        None,
        {"kubernetes.io/metadata.name": "portal-system"},
        {"kubernetes.io/metadata.name": "knative-serving"},
    ]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"internal_cidrs": ["10.0.0.1/8"]}, "'10.0.0.1/8' is not a network"),
        ({"internal_cidrs": ["0.0.0.0/0"]}, "is every address"),
        ({"internal_cidrs": "10.0.0.0/8"}, "setting internal_cidrs must be a list"),
        ({"portal_namespace": "Gpu Portal"}, "must name namespaces"),
    ],
)
def test_a_fence_that_would_not_hold_is_refused_by_name(values, message):
    with pytest.raises(ManifestError, match=message):
        ClusterSettings.from_cluster("k8s", values)


def test_the_validator_refuses_what_the_api_server_refuses_in_a_network_policy():
    policy = next(m for m in department_manifests("vision", 8, DEMO) if m["kind"] == "NetworkPolicy")
    policy["spec"]["egress"][2]["to"][0]["ipBlock"]["except"].append("fd00::/8")
    policy["spec"]["egress"][2]["to"].append({"ipBlock": {"cidr": "300.0.0.0/8"}})
    problems = manifest_problems(policy)
    assert any("except[5]: 'fd00::/8' must be strictly within '0.0.0.0/0'" in p for p in problems)
    assert any("'300.0.0.0/8' is not a CIDR" in p for p in problems)
