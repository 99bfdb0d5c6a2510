"""The API's vocabulary: which resources the fake serves, and its Status errors.

``RESOURCES`` is the discovery table of the real API server for the kinds the portal touches (core v1, apps,
batch, networking, scheduling) and the CRDs it creates (Kubeflow Training Operator v1 and MPI Operator
v2beta1 jobs, KServe v1beta1 InferenceService). Errors are ``Status`` objects (kind Status, status Failure,
reason, code, details) as the API conventions define them and the ``kubernetes`` client's ApiException
parses them.
"""

from __future__ import annotations

import datetime

# (group, version, plural) -> (kind, namespaced)
RESOURCES: dict[tuple[str, str, str], tuple[str, bool]] = {
    ("", "v1", "namespaces"): ("Namespace", False),
    ("", "v1", "nodes"): ("Node", False),
    ("", "v1", "persistentvolumes"): ("PersistentVolume", False),
    ("", "v1", "pods"): ("Pod", True),
    ("", "v1", "services"): ("Service", True),
    ("", "v1", "configmaps"): ("ConfigMap", True),
    ("", "v1", "secrets"): ("Secret", True),
    ("", "v1", "serviceaccounts"): ("ServiceAccount", True),
    ("", "v1", "persistentvolumeclaims"): ("PersistentVolumeClaim", True),
    ("", "v1", "resourcequotas"): ("ResourceQuota", True),
    ("", "v1", "events"): ("Event", True),
    ("apps", "v1", "deployments"): ("Deployment", True),
    ("apps", "v1", "statefulsets"): ("StatefulSet", True),
    ("batch", "v1", "jobs"): ("Job", True),
    ("networking.k8s.io", "v1", "ingresses"): ("Ingress", True),
    ("networking.k8s.io", "v1", "networkpolicies"): ("NetworkPolicy", True),
    ("scheduling.k8s.io", "v1", "priorityclasses"): ("PriorityClass", False),
    ("kubeflow.org", "v1", "pytorchjobs"): ("PyTorchJob", True),
    ("kubeflow.org", "v1", "tfjobs"): ("TFJob", True),
    ("kubeflow.org", "v2beta1", "mpijobs"): ("MPIJob", True),
    ("serving.kserve.io", "v1beta1", "inferenceservices"): ("InferenceService", True),
}
# Kinds whose schema manifest_problems knows (core kinds through kubernetes-validate, the CRDs it copies).
VALIDATED = {kind for kind, _ in RESOURCES.values()} - {"Event", "Node", "PersistentVolume"}


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_version_of(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def status_body(code: int, reason: str, message: str, **details) -> dict:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, **details):
        super().__init__(message)
        self.body = status_body(code, reason, message, **details)
        self.code = code


def resource_of(api_version: str, kind: str) -> tuple[tuple[str, str, str], bool]:
    group, _, version = api_version.rpartition("/")
    for (g, v, plural), (k, namespaced) in RESOURCES.items():
        if (g, v, k) == (group, version, kind):
            return (g, v, plural), namespaced
    raise KeyError(f"the fake does not serve {api_version} {kind}")
