"""A deployment variant -> one KServe InferenceService (serving.kserve.io/v1beta1). Pure: no Django, no I/O.

One InferenceService per variant, never KServe's own canary (``canaryTrafficPercent``): the portal's
router already splits traffic between variants (A/B, canary steps with guardrails, rolling plans,
shadows; serving/traffic.py) and records per-variant statistics, which a split inside one
InferenceService would hide from it. So a rolling upgrade here is two InferenceServices whose weights
the router moves, exactly as with local model servers.

The model is served by KServe's runtime for the version's framework (``predictor.model.modelFormat``),
loaded from ``storageUri``: the portal's ``store://<model>/<version>/<file>`` artifact mapped onto the
cluster with the ``artifact_uri_prefix`` setting (e.g. ``pvc://portal-models/`` for a PVC holding a copy
of the store, or ``s3://bucket/models/``).

Readiness follows KServe's own rule: condition Ready=True for the current generation.

The predictor pod is contained like the portal's job pods (clusters/pod_security.py): the cluster's
``run_as_user``/``run_as_group``, RuntimeDefault seccomp, no service-account token, and a model container
with no privilege escalation, no capabilities and a read-only root with /tmp on an emptyDir. The user and
seccomp profile are repeated on the container: Knative (serverless mode) drops pod-level fields other than
seccompProfile unless its ``kubernetes.podspec-securitycontext`` feature is enabled, and KServe's injected
storage-initializer still runs under the pod-level ones where they are kept.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from clusters import pod_security
from clusters.k8s import DEPARTMENT_LABEL, MANAGED_BY, ManifestError

API_VERSION, KIND = "serving.kserve.io/v1beta1", "InferenceService"
DEPLOYMENT_LABEL, VARIANT_LABEL, SERVER_ID_LABEL = "portal/deployment", "portal/variant", "portal/server-id"
SPEC_HASH_ANNOTATION = "portal/spec-sha256"
ISVC_LABEL = "serving.kserve.io/inferenceservice"  # KServe puts it on the predictor's pods
# KServe (serverless) names hosts "<name>-predictor-<namespace>"; leave room for that under 63.
MAX_NAME = 40
STORE_SCHEME = "store://"
# transitionStatus values of KServe's modelStatus after which waiting does not help.
FAILED_TRANSITIONS = ("BlockedByFailedLoad", "InvalidSpec")
# Keys the builder sets only with some settings: a spec patch removes them when the setting is gone.
OPTIONAL_PREDICTOR, OPTIONAL_MODEL = ("serviceAccountName",), ("runtime",)


@dataclass(frozen=True)
class ServingSettings:
    """How the portal serves models on one cluster: keys of Cluster.settings, with their defaults."""

    artifact_uri_prefix: str = ""  # store://m/1/model.joblib -> <prefix>m/1/model.joblib; required
    serving_runtime: str = ""  # a ServingRuntime name; empty: KServe picks one by model format
    serving_service_account: str = ""  # e.g. one holding the S3 credentials of the artifacts
    serving_deployment_mode: str = ""  # KServe annotation: RawDeployment | Serverless; empty: cluster default
    serving_cpu: str = "1"
    serving_memory: str = "2Gi"
    serving_max_replicas: int = 0  # autoscaling ceiling; 0: exactly the variant's replicas
    run_as_user: int = 1000  # the same keys as the job pods' (ClusterSettings)
    run_as_group: int = 1000

    @classmethod
    def from_settings(cls, cluster: str, settings: Mapping[str, Any]) -> ServingSettings:
        values = {f.name: settings[f.name] for f in fields(cls) if f.name in settings}
        for f in fields(cls):
            if f.name in values and (
                not isinstance(values[f.name], type(f.default)) or isinstance(values[f.name], bool)
            ):
                raise ManifestError(
                    f"Cluster {cluster}: setting {f.name} must be "
                    f"{'an integer' if isinstance(f.default, int) else 'a string'}."
                )
        for key in ("run_as_user", "run_as_group"):
            if key in values and not 1 <= values[key] <= 2**31 - 1:
                raise ManifestError(
                    f"Cluster {cluster}: {key} must be a uid/gid from 1 to 2147483647 (pods never run as root)."
                )
        return cls(**values)


@dataclass(frozen=True)
class InferenceTarget:
    """What one variant serves, and where."""

    server_id: int  # the variant's id
    deployment: str
    variant: str
    department: str
    namespace: str
    artifact_uri: str  # store://<model>/<version>/<file>
    framework: str = "sklearn"
    replicas: int = 1


def service_name(deployment: str, variant: str, server_id: int) -> str:
    """A DNS-1035 label unique per variant: readable deployment and variant names, then the variant's id.

    It is also the model's name in KServe's V1 paths (/v1/models/<name>:predict).
    """
    base = re.sub(r"[^a-z0-9-]+", "-", f"{deployment}-{variant}".lower()).strip("-")
    if not base or not base[0].isalpha():
        base = f"m-{base}".rstrip("-")
    suffix = f"-{server_id}"
    return base[: MAX_NAME - len(suffix)].rstrip("-") + suffix


def cluster_artifact_uri(artifact_uri: str, settings: ServingSettings) -> str:
    if not settings.artifact_uri_prefix:
        raise ManifestError(
            "This cluster has no artifact_uri_prefix setting: say where it finds the portal's model "
            "artifacts (e.g. pvc://portal-models/ or s3://bucket/models/)."
        )
    if not artifact_uri.startswith(STORE_SCHEME):
        raise ManifestError(f"{artifact_uri!r} is not in the portal's artifact store.")
    relative = artifact_uri[len(STORE_SCHEME) :]
    if not relative or relative.startswith("/") or ".." in relative.split("/"):
        raise ManifestError(f"{artifact_uri!r} is not a valid store URI.")
    return settings.artifact_uri_prefix.rstrip("/") + "/" + relative


def labels(target: InferenceTarget) -> dict[str, str]:
    return {
        DEPLOYMENT_LABEL: target.deployment,
        VARIANT_LABEL: target.variant,
        SERVER_ID_LABEL: str(target.server_id),
        DEPARTMENT_LABEL: target.department,
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }


def inference_service(target: InferenceTarget, settings: ServingSettings) -> dict[str, Any]:
    resources = {"cpu": settings.serving_cpu, "memory": settings.serving_memory}
    pod_context = pod_security.pod_security_context(settings.run_as_user, settings.run_as_group)
    model = {
        "modelFormat": {"name": target.framework},
        "storageUri": cluster_artifact_uri(target.artifact_uri, settings),
        "protocolVersion": "v1",  # the router speaks KServe V1: POST /v1/models/<name>:predict
        "resources": {"requests": resources, "limits": resources},
        "env": [{"name": name, "value": value} for name, value in pod_security.scratch_env().items()],
        "volumeMounts": [pod_security.scratch_mount()],
        "securityContext": {
            **pod_security.container_security_context(),
            **{key: pod_context[key] for key in ("runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile")},
        },
    }
    if settings.serving_runtime:
        model["runtime"] = settings.serving_runtime
    predictor = {
        "model": model,
        "minReplicas": target.replicas,
        "maxReplicas": max(target.replicas, settings.serving_max_replicas),
        "securityContext": pod_context,
        "automountServiceAccountToken": False,
        "volumes": [pod_security.scratch_volume()],
    }
    if settings.serving_service_account:
        predictor["serviceAccountName"] = settings.serving_service_account
    spec = {"predictor": predictor}
    annotations = {SPEC_HASH_ANNOTATION: spec_hash(spec)}
    if settings.serving_deployment_mode:
        annotations["serving.kserve.io/deploymentMode"] = settings.serving_deployment_mode
    name = service_name(target.deployment, target.variant, target.server_id)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": target.namespace, "labels": labels(target), "annotations": annotations},
        "spec": spec,
    }


def spec_hash(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def spec_patch(existing: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch that gives ``existing`` the wanted spec; None when it has it already.

    Keys the portal set before and sets no more are nulled (a merge patch keeps what it does not name);
    fields KServe's webhook defaulted are left alone.
    """
    annotation = wanted["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    if (existing.get("metadata", {}).get("annotations") or {}).get(SPEC_HASH_ANNOTATION) == annotation:
        return None
    old = (existing.get("spec") or {}).get("predictor") or {}
    predictor = {**{key: None for key in OPTIONAL_PREDICTOR if key in old}, **wanted["spec"]["predictor"]}
    predictor["model"] = {
        **{key: None for key in OPTIONAL_MODEL if key in (old.get("model") or {})},
        **predictor["model"],
    }
    return {
        "metadata": {"labels": wanted["metadata"]["labels"], "annotations": wanted["metadata"]["annotations"]},
        "spec": {"predictor": predictor},
    }


# ------------------------------------------------------------------------------ reading KServe's status


def ready_condition(obj: dict[str, Any]) -> dict[str, Any]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def is_ready(obj: dict[str, Any]) -> bool:
    """KServe's rule: Ready=True, and observed for the current spec (a changed spec is not ready until then)."""
    status = obj.get("status") or {}
    observed = status.get("observedGeneration")
    generation = (obj.get("metadata") or {}).get("generation")
    current = generation is None or (isinstance(observed, int) and observed >= generation)
    return ready_condition(obj).get("status") == "True" and current


def address(obj: dict[str, Any]) -> str:
    """Where the cluster reaches it: the cluster-internal address, else the public URL."""
    status = obj.get("status") or {}
    return ((status.get("address") or {}).get("url") or status.get("url") or "").rstrip("/")


def failure(obj: dict[str, Any]) -> str:
    """Why KServe gave up on it ("" when it has not): the model failed to load, or the spec is invalid."""
    model_status = (obj.get("status") or {}).get("modelStatus") or {}
    if model_status.get("transitionStatus") not in FAILED_TRANSITIONS:
        return ""
    info = model_status.get("lastFailureInfo") or {}
    why: str = (
        info.get("message")
        or info.get("reason")
        or ready_condition(obj).get("message")
        or model_status["transitionStatus"]
    )
    return why
