"""A job row as its executor sees it: the JobSpec and Placement a launch hands over (also what render_manifests
renders), the grace period of a stop, and the GPU limit of a department's namespace on a cluster.
"""

from __future__ import annotations

from clusters.k8s import department_gpu_limit
from clusters.models import Cluster, Storage
from jobs.executors.base import JobSpec, Mount, Placement, WorkerPlacement
from jobs.models import Job
from quotas.models import Quota


def grace_seconds(job: Job) -> int:
    """How long a job's workers have between SIGTERM and SIGKILL (its cluster's setting)."""
    return int(job.cluster.settings.get("grace_seconds", 30))


def department_limit(department, cluster: Cluster) -> int:
    """The most GPUs ``department`` may hold on ``cluster`` (its namespace's ResourceQuota on Kubernetes)."""
    quotas = Quota.objects.filter(department=department, pool__cluster=cluster).select_related("pool")
    return department_gpu_limit((quota.nominal, quota.borrowing_limit, quota.pool.total) for quota in quotas)


def job_spec(job: Job) -> JobSpec:
    storages = {storage.name: storage for storage in Storage.objects.filter(department=job.department)}
    return JobSpec(
        job_id=job.run_id,
        name=job.name,
        department=job.department.slug,
        code_url=job.code_url,
        code_ref=job.code_ref or None,
        command=job.command,
        framework=job.image.framework,
        image=job.image.image,
        base_packages=tuple(job.image.base_packages),
        requirements=tuple(job.requirements),
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
        mounts=tuple(
            Mount(
                name=m["storage"],
                path=m["path"],
                read_only=m["read_only"],
                source=storages[m["storage"]].local_path or storages[m["storage"]].pvc_name,
            )
            for m in job.mounts
            if m["storage"] in storages
        ),
        env=dict(job.env),
        max_runtime_seconds=job.max_runtime_seconds,
        grace_seconds=grace_seconds(job),
        gpu_type=job.pool.gpu_type,
        priority=job.priority.name,
        tensorboard=job.tensorboard,
        commit=job.commit or None,
        job_key=job.storage_key,
        run_index=job.preemptions,
        setup_timeout_seconds=int(job.cluster.settings.get("setup_timeout_seconds", 1800)),
    )


def placement_of(job: Job) -> Placement:
    return Placement(
        workers=tuple(
            WorkerPlacement(
                worker=slot["worker"],
                node=slot["node"],
                gpus=tuple(slot["gpus"]),
                gpu_fraction=slot.get("gpu_fraction"),
            )
            for slot in job.placement
        )
    )
