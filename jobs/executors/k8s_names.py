"""What a job is called on a Kubernetes cluster and where its files are: its kind (PyTorchJob, TFJob, MPIJob
or a batch Job), its name and labels, and the layout of the department's job volume (the subPaths of a run's
output and TensorBoard folders and of the job's checkpoint folder) with the container paths they are mounted
at. manifests.py builds the objects with these; the executor and the TensorBoard backend find them by them.
Pure: no Django, no I/O.
"""

from __future__ import annotations

import re

from clusters.k8s import DEPARTMENT_LABEL, JOB_ID_LABEL, MANAGED_BY
from jobs.executors.base import JobSpec

# Pod names add "-worker-63" (or "-launcher") to the job's name and must stay DNS labels (<= 63).
MAX_NAME = 52
WORKSPACE, CODE_DIR, PACKAGES_DIR = "/portal/workspace", "/portal/workspace/code", "/portal/workspace/packages"
TENSORBOARD_DIR, OUTPUT_DIR, CHECKPOINT_DIR = "/portal/tensorboard", "/portal/output", "/portal/checkpoints"


def kind_for(job: JobSpec) -> str:
    if job.framework == "tensorflow":
        return "TFJob"
    if job.framework == "mpi":
        return "MPIJob"
    if job.framework == "pytorch" or job.workers > 1:
        return "PyTorchJob"
    return "Job"


def resource_name(job: JobSpec) -> str:
    """The job's name on the cluster: a DNS-1035 label from its name and id, short enough for pod names."""
    job_id = re.sub(r"[^a-z0-9-]", "-", job.job_id.lower()).strip("-")
    base = re.sub(r"[^a-z0-9-]", "-", job.name.lower()).strip("-")
    if not base or not base[0].isalpha():
        base = f"job-{base}".rstrip("-")
    room = MAX_NAME - len(job_id) - 1
    return f"{base[: max(room, 1)].rstrip('-')}-{job_id}"[:MAX_NAME].rstrip("-")


def job_tensorboard_subpath(job_key: str) -> str:
    """The folder of a job's TensorBoard event files on its department's job volume, one ``run-<index>``
    folder per run inside: what a board mounts (tensorboard_k8s.job_run) to show every run."""
    return f"tensorboard/{job_key}"


def tensorboard_run_subpath(job_key: str, run_index: int) -> str:
    return f"{job_tensorboard_subpath(job_key)}/run-{run_index}"


def tensorboard_subpath(job_id: str) -> str:
    """Where runs wrote their event files before job keys (one folder per run id); nothing writes there now.
    Kept for tensorboards/services.py until it names boards' runs with tensorboard_k8s.job_run."""
    return f"{job_id}/tensorboard"


def checkpoint_subpath(job_key: str) -> str:
    """PORTAL_CHECKPOINT_DIR: one folder per job, the same for every run, so a re-run finds what the
    preempted run saved."""
    return f"checkpoints/{job_key}"


def output_subpath(job_id: str) -> str:
    """PORTAL_OUTPUT_DIR: per run (``job_id`` is the run's id)."""
    return f"{job_id}/output"


def job_volume_layout(job: JobSpec) -> dict[str, str]:
    """Mount path -> subPath of the job volume for one run of ``job``."""
    key = job_key(job)
    return {
        TENSORBOARD_DIR: tensorboard_run_subpath(key, job.run_index),
        OUTPUT_DIR: output_subpath(job.job_id),
        CHECKPOINT_DIR: checkpoint_subpath(key),
    }


def job_key(job: JobSpec) -> str:
    """What names the folders a job keeps across runs: its portal id (the run's id for a spec without one)."""
    return job.job_key or job.job_id


def labels(job: JobSpec) -> dict[str, str]:
    return {JOB_ID_LABEL: job.job_id, DEPARTMENT_LABEL: job.department, "app.kubernetes.io/managed-by": MANAGED_BY}
