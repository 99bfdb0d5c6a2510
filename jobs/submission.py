"""Checking a job submission against the rules a person can act on.

Every field problem is collected and reported at once, per field
(API.md: 400 with {"field": ["message", ...]}). Types are checked by the API's
input serializer first; this module checks meaning: what exists, what the
caller's department may use, what the cluster allows.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from django.db.models import Q

from accounts import selectors as account_selectors
from accounts.models import Department
from clusters.manifest_validation import DNS_1035
from clusters.models import Cluster, GpuPool, Storage
from clusters.services import cluster_refusal
from core.code_url import GIT_REF, code_url_problem
from core.errors import InvalidInput
from core.requirements import pip_requirements
from images.models import FrameworkImage
from jobs.executors.job_env import PORTAL_SET_ENV
from quotas import selectors as quota_selectors
from quotas.models import PriorityClass

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What the portal sets in every job (jobs/executors/job_env.py), and PATH and VIRTUAL_ENV of its environment.
RESERVED_ENV = PORTAL_SET_ENV | {"PATH", "VIRTUAL_ENV"}
RESERVED_ENV_PREFIXES = ("PORTAL_",)
MAX_COMMAND = 10_000
MAX_WORKERS = 64
MAX_RUNTIME_SECONDS = 30 * 24 * 3600
DEFAULT_MAX_RUNTIME_SECONDS = 7 * 24 * 3600
MAX_MOUNTS = 20
MAX_ENV = 100


@dataclass
class CleanJob:
    name: str
    department: Department
    cluster: Cluster
    pool: GpuPool
    code_url: str
    code_ref: str
    command: str
    image: FrameworkImage
    requirements: list[str]
    workers: int
    gpus_per_worker: float
    priority: PriorityClass
    mounts: list[dict]
    env: dict[str, str]
    tensorboard: bool
    max_runtime_seconds: int


def check_submission(*, user, data: dict, type_errors: dict | None = None, cluster_health: bool = True) -> CleanJob:
    """Turn typed input into a CleanJob, or raise InvalidInput naming every problem.

    ``cluster_health``: refuse a cluster that takes no jobs now (clusters.health); off only for previews of
    manifests (manage.py render_manifests), which never reach the cluster.

    ``type_errors`` are the problems the API already found in fields that did
    not even parse; those fields are absent from ``data`` and their rules are
    skipped, while every other field is still checked, so that a person sees
    everything to fix at once.
    """
    errors: dict[str, list] = {field: list(messages) for field, messages in (type_errors or {}).items()}
    skip = set(errors)

    def fail(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    name = data.get("name")
    if name is not None:
        if len(name) > 40:
            fail("name", f"Use at most 40 characters (this name has {len(name)}).")
        elif not DNS_1035.match(name):
            fail("name", "Use lower-case letters, digits and '-', starting with a letter and not ending with '-'.")

    department = None
    if data.get("department") is not None:
        department = account_selectors.department_for_input(user=user, slug=data["department"], errors=errors)

    # The department's quotas, read once: its default cluster and the pools it may use there.
    quotas = quota_selectors.department_quotas(department=department) if department and "cluster" not in skip else []
    cluster = _cluster(data, department, quotas, fail, cluster_health) if "cluster" not in skip else None
    pool = _pool(data, department, cluster, quotas, fail) if cluster and department and "gpu_type" not in skip else None
    if data.get("code_url") is not None:
        _code(data, cluster, fail)

    command = (data.get("command") or "").strip()
    if "command" not in skip:
        if not command:
            fail("command", "Give the command to run, e.g. 'python train.py --epochs 3'.")
        elif len(command) > MAX_COMMAND:
            fail("command", f"Keep the command under {MAX_COMMAND} characters; put long scripts in the repository.")
        elif "\x00" in command:
            fail("command", "The command contains a NUL character.")

    image = None
    if department is not None and data.get("image") is not None:
        image = FrameworkImage.objects.filter(images_of(department), name=data["image"]).first()
        if image is None:
            choices = ", ".join(FrameworkImage.objects.filter(images_of(department)).values_list("name", flat=True))
            fail("image", f"No image called {data['image']!r} in the catalogue; choose one of: {choices}.")
        elif (
            cluster is not None
            and cluster.backend != Cluster.Backend.LOCAL  # there images_on_cluster is images_of: it was found
            and not FrameworkImage.objects.filter(images_on_cluster(department, cluster), pk=image.pk).exists()
        ):
            built_on = ", ".join(sorted(set(image.builds.values_list("cluster__name", flat=True))))
            offered = FrameworkImage.objects.filter(images_on_cluster(department, cluster)).distinct()
            fail(
                "image",
                f"Image {image.name} was built on cluster {built_on} and is pulled from its registry, so it does not "
                f"run on cluster {cluster.name}; choose one of: {', '.join(i.name for i in offered)}.",
            )

    workers = data.get("workers")
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        fail("workers", f"Use between 1 and {MAX_WORKERS} workers.")
        workers = None
    gpus = data.get("gpus_per_worker")
    if gpus is not None:
        _gpus(gpus, workers or 1, pool, fail)

    priority = None
    if data.get("priority") is not None:
        priority = PriorityClass.objects.filter(name=data["priority"]).first()
        if priority is None:
            fail(
                "priority",
                f"No priority class {data['priority']!r}; choose one of: "
                + ", ".join(PriorityClass.objects.values_list("name", flat=True))
                + ".",
            )

    requirements = pip_requirements(
        data.get("requirements") or [],
        fail,
        allow_local_files=bool(cluster and cluster.settings.get("allow_local_code")),
        allowed_indexes=tuple((cluster.settings.get("pip_indexes") or ()) if cluster else ()),
    )
    mounts = _mounts(data.get("mounts") or [], department, fail) if department else []
    env = _env(data.get("env") or {}, fail)

    runtime = data.get("max_runtime_seconds")
    if runtime is None:
        runtime = DEFAULT_MAX_RUNTIME_SECONDS
    if not 1 <= runtime <= MAX_RUNTIME_SECONDS:
        fail("max_runtime_seconds", f"Use between 1 second and {MAX_RUNTIME_SECONDS} seconds (30 days).")

    if errors:
        raise InvalidInput(errors)
    return CleanJob(
        name=name,
        department=department,
        cluster=cluster,
        pool=pool,
        code_url=data["code_url"].strip(),
        code_ref=(data.get("code_ref") or "").strip(),
        command=command,
        image=image,
        requirements=requirements,
        workers=workers,
        gpus_per_worker=float(gpus),
        priority=priority,
        mounts=mounts,
        env=env,
        tensorboard=data["tensorboard"],
        max_runtime_seconds=runtime,
    )


def images_of(department: Department) -> Q:
    """Images a department may use: the official ones and its own custom ones."""
    return Q(official=True) | Q(department=department)


def images_on_cluster(department: Department, cluster: Cluster) -> Q:
    """Images a department may run on ``cluster``: the official ones, and its own unless a build made them on
    another Kubernetes cluster (they are in that cluster's registry). A local cluster runs each image's
    packages in a virtualenv instead, so it runs them all."""
    if cluster.backend == Cluster.Backend.LOCAL:
        return images_of(department)
    built_elsewhere = FrameworkImage.objects.filter(builds__isnull=False).exclude(builds__cluster=cluster)
    return Q(official=True) | (Q(department=department) & ~Q(pk__in=built_elsewhere.values("pk")))


def _cluster(data, department, quotas, fail, check_health=True):
    if data.get("cluster"):
        cluster = Cluster.objects.filter(name=data["cluster"]).first()
        if cluster is None:
            fail("cluster", f"No cluster called {data['cluster']!r}; see GET /api/v1/clusters/.")
            return None
        refusal = cluster_refusal(cluster) if check_health else None
        if refusal:
            fail("cluster", refusal)  # the other fields are still checked against it: every problem at once
        return cluster
    if department is None:
        return None
    cluster = quota_selectors.default_cluster(department=department, quotas=quotas)
    if cluster is None:
        fail("cluster", f"Department {department.slug} has no GPU quota on any cluster; ask a platform admin for one.")
        return None
    refusal = cluster_refusal(cluster) if check_health else None
    if refusal:  # the default cannot take jobs now: the next cluster the department has quota on that can
        others = Cluster.objects.filter(pools__quotas__department=department).exclude(pk=cluster.pk).distinct()
        usable = next((other for other in others.order_by("pk") if not cluster_refusal(other)), None)
        if usable is None:
            fail("cluster", refusal)
        return usable or cluster
    return cluster


def _pool(data, department, cluster, department_quotas, fail):
    quotas = [quota for quota in department_quotas if quota.pool.cluster_id == cluster.pk]  # by GPU type
    types = [quota.pool.gpu_type for quota in quotas]
    if not types:
        fail("cluster", f"Department {department.slug} has no GPU quota on cluster {cluster.name}.")
        return None
    if not data.get("gpu_type"):
        return quotas[0].pool
    for quota in quotas:
        if quota.pool.gpu_type == data["gpu_type"]:
            return quota.pool
    fail(
        "gpu_type",
        f"Department {department.slug} has no quota for {data['gpu_type']!r} GPUs on cluster "
        f"{cluster.name}; it has quota for: {', '.join(types)}.",
    )
    return None


def _code(data, cluster, fail):
    url = data["code_url"].strip()
    allow_local = bool(cluster and cluster.settings.get("allow_local_code"))
    problem = code_url_problem(
        url, allow_local=allow_local, where=f"cluster {cluster.name}" if cluster else "this cluster"
    )
    if problem:
        fail("code_url", problem)
    ref = (data.get("code_ref") or "").strip()
    if ref and not GIT_REF.match(ref):
        fail(
            "code_ref", "Give a branch, tag or commit SHA (letters, digits, '.', '_', '/', '-'; not starting with '-')."
        )


def _gpus(gpus, workers, pool, fail):
    if gpus < 0 or math.isnan(gpus):
        fail("gpus_per_worker", "Ask for 0 or more GPUs per worker.")
        return
    if pool is None:
        return
    if 0 < gpus < 1:
        if not pool.shareable:
            fail("gpus_per_worker", f"{pool} GPUs are not shared: ask for whole GPUs (1 to {pool.gpus_per_node}).")
        elif round(gpus, 2) != gpus or gpus < 0.05:
            fail("gpus_per_worker", "Give a GPU fraction in hundredths, at least 0.05 (e.g. 0.25 or 0.5).")
    elif gpus >= 1:
        if gpus != int(gpus):
            fail("gpus_per_worker", "Above 1, ask for a whole number of GPUs per worker.")
        elif gpus > pool.gpus_per_node:
            fail(
                "gpus_per_worker",
                f"A worker runs on one node and {pool} nodes have {pool.gpus_per_node} GPUs; "
                "ask for at most that many per worker and add workers instead.",
            )
        elif workers * gpus > pool.total:
            fail(
                "workers",
                f"{workers} workers x {gpus:g} GPUs = {workers * gpus:g} GPUs, more than the "
                f"{pool.total} that {pool} has.",
            )


def _mounts(items, department, fail):
    if not items:
        return []
    if len(items) > MAX_MOUNTS:
        fail("mounts", f"Mount at most {MAX_MOUNTS} storage volumes.")
        return []
    own = {storage.name: storage for storage in Storage.objects.filter(department=department)}
    clean, paths = [], set()
    for index, mount in enumerate(items):
        label = f"Mount {index + 1}"
        storage = own.get(mount["storage"])
        if storage is None:
            choices = ", ".join(sorted(own)) or "none yet"
            fail(
                "mounts",
                f"{label}: {department.slug} has no storage called {mount['storage']!r} (its storage: {choices}).",
            )
            continue
        path = mount["path"]
        if not path.startswith("/") or ".." in path.split("/") or len(path) > 200:
            fail("mounts", f"{label}: mount path {path!r} must be an absolute path without '..'.")
            continue
        if path in paths:
            fail("mounts", f"{label}: {path!r} is already used by another mount.")
            continue
        paths.add(path)
        clean.append({"storage": storage.name, "path": path, "read_only": mount["read_only"]})
    return clean


def _env(env, fail):
    if len(env) > MAX_ENV:
        fail("env", f"Set at most {MAX_ENV} environment variables.")
        return {}
    for name, value in env.items():
        if not ENV_NAME.match(name):
            fail("env", f"{name!r} is not a valid variable name (letters, digits and '_', not starting with a digit).")
        elif name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
            fail("env", f"{name} is set by the portal for every job and cannot be overridden.")
        elif len(value) > 4096 or "\x00" in value:
            fail("env", f"The value of {name} must be under 4096 characters, without NUL.")
    return dict(env)
