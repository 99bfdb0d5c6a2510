"""Image build spec + cluster settings -> the Kubernetes objects that build it with Kaniko. Pure: no Django, no I/O.

A build is one batch/v1 Job running the Kaniko executor (argv only, no shell) in the department's
namespace; it pushes to ``<build_registry>/<department>/<name>:<tag>`` and writes the pushed digest to
the container's termination message (``--digest-file=/dev/termination-log``), where the portal reads it.

The build context is either
- a pasted Dockerfile: a ConfigMap holding it, mounted as the context directory (``dir://``). It is made
  after the Job and owned by it, so deleting the Job deletes it; the pod waits for its volume meanwhile;
- a git repository: Kaniko's git context ``git://<host>/<path>#<ref>``. Kaniko always fetches it over
  https (``git://`` is only its marker for "git"), so only https URLs are accepted. A branch name
  becomes ``refs/heads/<branch>``, a full ref (``refs/tags/v1``) or a 40-hex commit goes as it is.
  ``--context-sub-path`` picks a directory of the repository, ``--dockerfile`` is relative to it.

Containment: the build runs a department's Dockerfile, so it gets what Kaniko allows of what the job pods
get (clusters/pod_security.py): no service-account token, the RuntimeDefault seccomp profile, no
privilege escalation, and all capabilities dropped but the file-owner ones an image build uses (``KANIKO_CAPABILITIES``:
unpacking layers as any owner with their modes, set-id bits and file capabilities, and RUN steps that switch
users, as apt does). It cannot run as non-root nor on a read-only root filesystem: Kaniko builds the image
by unpacking the base image over its own root filesystem and running the RUN steps there, as root (uid 0
inside the container is what lets it create files owned by any user). The department's NetworkPolicy
applies to builds as to jobs.

Cluster settings read here (Cluster.settings): ``build_registry`` (required), ``build_push_secret``
(a kubernetes.io/dockerconfigjson Secret in each department namespace, mounted at /kaniko/.docker),
``build_insecure_registry`` (push over plain http), ``build_cpu``, ``build_memory``,
``build_deadline_seconds``; plus the job settings (namespace, image mirror, pull secret, TTL).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clusters.k8s import DEPARTMENT_LABEL, MANAGED_BY, ClusterSettings

KANIKO_IMAGE = "gcr.io/kaniko-project/executor:v1.23.2"
BUILD_ID_LABEL = "portal/build-id"
CONTAINER = "kaniko"
CONTEXT_DIR = "/workspace"
DOCKER_CONFIG_DIR = "/kaniko/.docker"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# A registry host (with an optional port) and optional path: what `docker push` accepts before "/<repo>".
REGISTRY = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
MAX_NAME = 63
KANIKO_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETFCAP"]


class BuildSetupError(ValueError):
    """The cluster is not set up for image builds (a platform admin can act on the message)."""


@dataclass(frozen=True)
class BuildSettings:
    registry: str
    push_secret: str = ""
    insecure_registry: bool = False
    cpu: str = "1"
    memory: str = "4Gi"
    deadline_seconds: int = 3600

    @classmethod
    def from_settings(cls, cluster: str, settings: Mapping[str, Any]) -> BuildSettings:
        registry = str(settings.get("build_registry") or "").strip().rstrip("/")
        if not registry:
            raise BuildSetupError(
                f"Cluster {cluster} has no registry to push built images to: a platform admin "
                'sets build_registry in its settings (e.g. "registry.example.com/portal").'
            )
        if not REGISTRY.match(registry):
            raise BuildSetupError(
                f"Cluster {cluster}: build_registry {registry!r} is not a registry host with an "
                'optional path, e.g. "registry.example.com:5000/portal".'
            )
        made = cls(
            registry=registry,
            push_secret=_typed(cluster, settings, "build_push_secret", str, ""),
            insecure_registry=_typed(cluster, settings, "build_insecure_registry", bool, False),
            cpu=_typed(cluster, settings, "build_cpu", str, cls.cpu),
            memory=_typed(cluster, settings, "build_memory", str, cls.memory),
            deadline_seconds=_typed(cluster, settings, "build_deadline_seconds", int, cls.deadline_seconds),
        )
        for key, value in (("build_cpu", made.cpu), ("build_memory", made.memory)):
            if not QUANTITY.match(value):
                raise BuildSetupError(
                    f"Cluster {cluster}: {key} {value!r} is not a Kubernetes quantity (e.g. 2, 500m, 4Gi)."
                )
        if made.deadline_seconds < 60:
            raise BuildSetupError(f"Cluster {cluster}: build_deadline_seconds must be at least 60.")
        return made


def _typed(cluster: str, settings: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    value = settings.get(key, default)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        what = {str: "a string", bool: "true or false", int: "an integer"}[kind]
        raise BuildSetupError(f"Cluster {cluster}: setting {key} must be {what}.")
    return value


@dataclass(frozen=True)
class BuildSpec:
    build_id: int
    name: str  # the catalogue name: a DNS label, also the repository name under the department
    department: str
    tag: str
    dockerfile: str = ""  # pasted Dockerfile text; empty for a repository build
    code_url: str = ""  # https git URL
    code_ref: str = ""  # branch, full ref or commit; empty: the default branch
    dockerfile_path: str = "Dockerfile"  # relative to the context directory
    context_path: str = ""  # directory of the repository used as the context; empty: its root

    @property
    def pasted(self) -> bool:
        return bool(self.dockerfile)


def destination(spec: BuildSpec, build: BuildSettings) -> str:
    return f"{build.registry}/{spec.department}/{spec.name}:{spec.tag}"


def git_context(code_url: str, ref: str = "") -> str:
    """Kaniko's git context for an https repository URL at ``ref``."""
    if not code_url.startswith("https://"):
        raise ValueError(f"Kaniko fetches git contexts over https; got {code_url!r}.")
    context = "git://" + code_url.removeprefix("https://")
    if not ref:
        return context
    if COMMIT.match(ref) or ref.startswith("refs/"):
        return f"{context}#{ref}"
    return f"{context}#refs/heads/{ref}"


def job_name(spec: BuildSpec) -> str:
    return f"build-{spec.build_id}-{spec.name}"[:MAX_NAME].rstrip("-")


def labels(spec: BuildSpec) -> dict[str, str]:
    return {
        BUILD_ID_LABEL: str(spec.build_id),
        DEPARTMENT_LABEL: spec.department,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/component": "image-build",
    }


def kaniko_args(spec: BuildSpec, build: BuildSettings) -> list[str]:
    if spec.pasted:
        args = [f"--context=dir://{CONTEXT_DIR}", f"--dockerfile={CONTEXT_DIR}/Dockerfile"]
    else:
        args = [f"--context={git_context(spec.code_url, spec.code_ref)}", f"--dockerfile={spec.dockerfile_path}"]
        if spec.context_path.strip("/"):
            args.append(f"--context-sub-path={spec.context_path.strip('/')}")
    args += [f"--destination={destination(spec, build)}", "--digest-file=/dev/termination-log", "--push-retry=2"]
    if build.insecure_registry:
        args.append("--insecure")
    return args


def job_manifest(spec: BuildSpec, build: BuildSettings, cluster: ClusterSettings) -> dict[str, Any]:
    """The batch/v1 Job running Kaniko: one attempt (backoffLimit 0), bounded by the build deadline."""
    mounts, volumes = [], []
    if spec.pasted:
        mounts.append({"name": "context", "mountPath": CONTEXT_DIR, "readOnly": True})
        volumes.append({"name": "context", "configMap": {"name": job_name(spec)}})
    if build.push_secret:
        mounts.append({"name": "docker-config", "mountPath": DOCKER_CONFIG_DIR, "readOnly": True})
        volumes.append(
            {
                "name": "docker-config",
                "secret": {
                    "secretName": build.push_secret,
                    "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
                },
            }
        )
    container = {
        "name": CONTAINER,
        "image": cluster.image(KANIKO_IMAGE),
        "args": kaniko_args(spec, build),
        "resources": {"requests": {"cpu": build.cpu, "memory": build.memory}, "limits": {"memory": build.memory}},
        "volumeMounts": mounts,
        # Kaniko writes the digest there; on a failure without one, the log's tail becomes the message.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": False,
            "capabilities": {"drop": ["ALL"], "add": list(KANIKO_CAPABILITIES)},
        },
    }
    pod = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": volumes,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
    }
    if cluster.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": cluster.image_pull_secret}]
    job_spec = {
        "backoffLimit": 0,
        "activeDeadlineSeconds": build.deadline_seconds,
        "template": {"metadata": {"labels": labels(spec)}, "spec": pod},
    }
    if cluster.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = cluster.ttl_seconds_after_finished
    metadata = {"name": job_name(spec), "namespace": cluster.namespace(spec.department), "labels": labels(spec)}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}


def context_config_map(spec: BuildSpec, cluster: ClusterSettings, *, job_uid: str) -> dict[str, Any]:
    """The pasted Dockerfile as the build context, owned by the build's Job (deleted with it)."""
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": job_name(spec),
        "uid": job_uid,
        "blockOwnerDeletion": True,
        "controller": False,
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": job_name(spec),
            "namespace": cluster.namespace(spec.department),
            "labels": labels(spec),
            "ownerReferences": [owner],
        },
        "data": {"Dockerfile": spec.dockerfile},
    }
