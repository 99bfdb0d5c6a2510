"""What the manifest tests (tests/jobs/test_manifests*.py) share: the demo Kubernetes cluster's settings, the
job environment contract, a job spec with defaults, and readers of rendered manifests (pods, main container, env)."""

from __future__ import annotations

from clusters.k8s import (
    ClusterSettings,
)
from clusters.manifest_validation import manifest_problems
from demo.data import K8S_DEMO_POOLS, K8S_DEMO_SETTINGS
from jobs.executors.base import JobSpec, Placement, WorkerPlacement
from jobs.executors.manifests import job_manifests

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
