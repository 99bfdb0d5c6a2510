"""The demo world that `make run` loads: two departments, four users, a local cluster both departments share
(so its jobs run sandboxed), and on request a Kubernetes cluster (`k8s-demo`) to render manifests for.

Idempotent: running it again adds what is missing and changes nothing an
admin has since edited (quotas, passwords), except that an explicit
PORTAL_DEMO_PASSWORD is applied to the demo users every time.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction

from accounts.models import Department, Membership
from clusters.inventory import DetectedPool
from clusters.models import Cluster, GpuPool, Storage
from images.models import FrameworkImage
from quotas.isolation import cluster_save
from quotas.models import PriorityClass, Quota

DEPARTMENTS = {"vision": "Computer Vision", "nlp": "Natural Language Processing"}
USERS = [
    # username, department, role, platform admin
    ("alice", "vision", Membership.Role.MEMBER, False),
    ("carol", "vision", Membership.Role.DEPT_ADMIN, False),
    ("bob", "nlp", Membership.Role.MEMBER, False),
    ("admin", None, None, True),
]
# Preemptible work may borrow idle GPUs beyond its department's quota (and is reclaimed when the
# owner needs them); "high" never is, so it runs only within quota.
PRIORITIES = [("high", 1000, False), ("normal", 500, True), ("low", 100, True)]
# Two departments share this host, so their jobs run sandboxed (the default, said here so that the admin
# shows it); setup is limited as on any cluster.
LOCAL_SETTINGS = {"allow_local_code": True, "grace_seconds": 30, "isolation": "sandbox", "setup_timeout_seconds": 1800}
# A Kubernetes cluster the demo cannot reach but can render manifests for (manage.py render_manifests):
# pools as (GPU type, nodes, GPUs per node, GPU memory GB, shareable); each department gets half of each.
# "rendering_only" marks it so (clusters/health.py): it is never connected to, the pages and selectors say
# "rendering-only example", and jobs and image builds sent to it are refused at once.
K8S_DEMO = "k8s-demo"
K8S_DEMO_POOLS = [("V100", 4, 8, 32, False), ("T4", 8, 4, 16, True)]
K8S_DEMO_SETTINGS = {
    "rendering_only": True,
    "namespace_prefix": "portal-",
    "gpu_resource": "nvidia.com/gpu",
    "shared_gpu_resource": "aliyun.com/gpu-mem",  # ACK cGPU: GiB of GPU memory
    "shared_gpu_unit": "GiB",
    "gpu_node_label": "nvidia.com/gpu.product",
    "gpu_node_values": {"V100": "Tesla-V100-SXM2-32GB", "T4": "Tesla-T4"},
    "image_registry": "registry.example.com/gpu-portal",
    "storage_pvcs": {"vision-datasets": "vision-datasets"},
    "job_volume_pvc": "portal-jobs",
    "grace_seconds": 30,
}
IMAGES = [
    # name, framework, image reference, packages the local executor installs in its place
    ("python", "python", "python:3.11-slim", []),
    ("pytorch", "pytorch", "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime", ["torch==2.13.0"]),
    ("tensorflow", "tensorflow", "tensorflow/tensorflow:2.17.0-gpu", ["tensorflow-cpu==2.17.1"]),
]


@dataclass
class DemoResult:
    password: str
    password_source: str
    users: list[tuple[str, str]]
    pools: list[DetectedPool]


def demo_load(
    *,
    data_root: Path,
    pools: list[DetectedPool],
    password: str | None,
    with_kubernetes: bool = False,
) -> DemoResult:
    """Load the demo world; ``with_kubernetes`` adds the k8s-demo cluster and quotas on it.

    Opt-in for now: a submission that names no cluster goes to the first cluster (by name) where its
    department has quota, and "k8s-demo" sorts before "local".
    """
    source = "PORTAL_DEMO_PASSWORD"
    password_file = data_root / "demo-password"
    if password is None:
        source = str(password_file)
        if not password_file.exists():
            password_file.write_text(secrets.token_urlsafe(9))
            password_file.chmod(0o600)
        password = password_file.read_text().strip()
    apply_password = source == "PORTAL_DEMO_PASSWORD"

    with transaction.atomic():
        departments = {
            slug: Department.objects.get_or_create(slug=slug, defaults={"name": name})[0]
            for slug, name in DEPARTMENTS.items()
        }
        summary = []
        user_model = get_user_model()
        for username, dept, role, is_admin in USERS:
            user, created = user_model.objects.get_or_create(
                username=username,
                defaults={"is_staff": is_admin, "is_superuser": is_admin, "email": f"{username}@example.com"},
            )
            if created or apply_password:
                user.set_password(password)
                user.save()
            if dept:
                Membership.objects.get_or_create(user=user, department=departments[dept], defaults={"role": role})
            summary.append((username, f"{role.label} of {dept}" if dept else "platform admin"))

        cluster = _cluster_ensure(name="local", backend=Cluster.Backend.LOCAL, settings=LOCAL_SETTINGS)
        for detected in pools:
            pool, created = GpuPool.objects.get_or_create(
                cluster=cluster,
                gpu_type=detected.gpu_type,
                defaults={
                    "gpu_memory_gb": detected.gpu_memory_gb,
                    "nodes": 1,
                    "gpus_per_node": detected.gpus,
                    "shareable": True,
                },
            )
            if created:
                # Split the pool between the departments; vision gets any odd GPU.
                share, rest = divmod(pool.total, len(departments))
                for index, department in enumerate(departments.values()):
                    Quota.objects.get_or_create(
                        department=department,
                        pool=pool,
                        defaults={"nominal": share + (rest if index == 0 else 0), "borrowing_limit": None},
                    )

        if with_kubernetes:
            _load_k8s_demo(departments)

        for name, value, preemptible in PRIORITIES:
            PriorityClass.objects.get_or_create(name=name, defaults={"value": value, "preemptible": preemptible})
        for name, framework, reference, packages in IMAGES:
            FrameworkImage.objects.get_or_create(
                name=name,
                defaults={"framework": framework, "image": reference, "official": True, "base_packages": packages},
            )
        for slug, storage_name in [("vision", "vision-datasets"), ("nlp", "nlp-corpora")]:
            path = data_root / "storage" / storage_name
            path.mkdir(parents=True, exist_ok=True)
            Storage.objects.get_or_create(
                department=departments[slug],
                name=storage_name,
                defaults={"kind": Storage.Kind.LOCAL, "local_path": str(path), "description": "Demo data sets"},
            )
    return DemoResult(password=password, password_source=source, users=summary, pools=pools)


def _load_k8s_demo(departments: dict[str, Department]) -> None:
    k8s = _cluster_ensure(name=K8S_DEMO, backend=Cluster.Backend.KUBERNETES, settings=K8S_DEMO_SETTINGS)
    for gpu_type, nodes, per_node, memory, shareable in K8S_DEMO_POOLS:
        pool, created = GpuPool.objects.get_or_create(
            cluster=k8s,
            gpu_type=gpu_type,
            defaults={"nodes": nodes, "gpus_per_node": per_node, "gpu_memory_gb": memory, "shareable": shareable},
        )
        if created:
            for department in departments.values():
                Quota.objects.get_or_create(
                    department=department,
                    pool=pool,
                    defaults={"nominal": pool.total // len(departments), "borrowing_limit": None},
                )


def _cluster_ensure(*, name: str, backend: str, settings: dict) -> Cluster:
    """The demo cluster with any of ``settings`` it lacks added; what an admin set stays."""
    cluster = Cluster.objects.filter(name=name).first() or Cluster(name=name, backend=backend)
    merged = {**settings, **cluster.settings}
    if cluster.pk is None or merged != cluster.settings:
        cluster.settings = merged
        cluster_save(actor=None, cluster=cluster)
    return cluster


def publish_example_repo(*, source: Path, target: Path) -> str:
    """Keep a local git repository at ``target`` holding the files of ``source``; returns its file:// URL.

    The demo's example job is submitted from it, so that a new user sees a job
    run from a real git URL without any server.
    """
    git = ["git", "-c", "user.name=GPU Portal demo", "-c", "user.email=demo@localhost", "-C", str(target)]
    if not (target / ".git").exists():
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "--quiet", "--initial-branch=main", str(target)], check=True)
    for path in source.rglob("*"):
        relative = path.relative_to(source)
        # What a local run of the example leaves behind is not part of it.
        if set(relative.parts) & {"__pycache__", ".venv", "output", "runs", ".git"} or path.is_dir():
            continue
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target / relative)
    subprocess.run([*git, "add", "--all"], check=True)
    if subprocess.run([*git, "diff", "--cached", "--quiet"]).returncode != 0:
        subprocess.run([*git, "commit", "--quiet", "-m", "Example: digits classifier"], check=True)
    return f"file://{target}"
