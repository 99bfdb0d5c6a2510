"""Checking manifests before they reach a cluster, as strictly as the cluster would (or more).

- Custom resources (PyTorchJob, TFJob, MPIJob, KServe's InferenceService) against the openAPIV3Schema
  of the official CRDs copied in crds/ (SOURCE.txt), made CLOSED: an object whose schema lists its
  properties accepts no others, so a typo fails here instead of being pruned silently by the API server.
- Core kinds (Job, Namespace, ResourceQuota, PriorityClass, PersistentVolumeClaim, NetworkPolicy ...) with
  kubernetes-validate in strict mode (its schemas ship with the package: works offline), and what the API
  server checks beyond the schema for a NetworkPolicy: CIDRs, and each ``except`` inside its block.
- What the operators' admission webhooks check and the CRDs do not encode: container names
  ``pytorch`` / ``tensorflow``, one Master, at least one worker, one Launcher, restart policies, and
  DNS-1035 names short enough for the pods' host names; label keys and values for every kind.

No Django; reads only the schema files beside it.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

CRDS = Path(__file__).resolve().parent / "crds"
CRD_FILES = {
    ("kubeflow.org/v1", "PyTorchJob"): "training-operator-v1.9.4/kubeflow.org_pytorchjobs.yaml",
    ("kubeflow.org/v1", "TFJob"): "training-operator-v1.9.4/kubeflow.org_tfjobs.yaml",
    ("kubeflow.org/v2beta1", "MPIJob"): "mpi-operator-v0.8.0/kubeflow.org_mpijobs.yaml",
    ("serving.kserve.io/v1beta1", "InferenceService"): "kserve-v0.20.0/serving.kserve.io_inferenceservices.yaml",
}
KUBERNETES_VERSION = "1.32"  # the oldest Kubernetes the portal supports
MAX_ERRORS = 20

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# Replica types, the container each operator runs, restart policies its webhook accepts.
REPLICAS = {
    "PyTorchJob": ("pytorchReplicaSpecs", {"Master", "Worker"}, "pytorch"),
    "TFJob": ("tfReplicaSpecs", {"Chief", "Master", "PS", "Worker", "Evaluator"}, "tensorflow"),
    "MPIJob": ("mpiReplicaSpecs", {"Launcher", "Worker"}, None),
}
RESTART_POLICIES = {"Always", "OnFailure", "Never", "ExitCode"}
MPI_RESTART_POLICIES = {"OnFailure", "Never"}
# Longest suffix an operator adds to the job's name for a pod / its service (the name must stay a DNS label).
POD_SUFFIX = {"PyTorchJob": "-worker-{n}", "TFJob": "-worker-{n}", "MPIJob": "-worker-{n}"}


class ManifestInvalid(ValueError):
    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def check_manifests(manifests: list[dict]) -> None:
    """Raise ManifestInvalid naming every problem of every manifest."""
    problems = [problem for manifest in manifests for problem in manifest_problems(manifest)]
    if problems:
        raise ManifestInvalid(problems)


def manifest_problems(manifest: dict) -> list[str]:
    """Readable problems of one manifest, each as '<Kind> <name>: <path>: <what is wrong>'; [] when valid."""
    if not isinstance(manifest, dict) or not manifest.get("kind") or not manifest.get("apiVersion"):
        return ["a manifest needs apiVersion and kind"]
    kind, api_version = manifest["kind"], manifest["apiVersion"]
    metadata = manifest.get("metadata") if isinstance(manifest.get("metadata"), dict) else {}
    where = f"{kind} {metadata.get('name') or '(no name)'}"
    if (api_version, kind) in CRD_FILES:
        found = _schema_problems(manifest, crd_validator(api_version, kind))
        found += _webhook_problems(manifest) if kind in REPLICAS else []
    else:
        found = _core_problems(manifest)
    found += _metadata_problems(kind, metadata, "metadata")
    return [f"{where}: {problem}" for problem in found[:MAX_ERRORS]]


# -------------------------------------------------------------------------------- custom resources


@functools.cache
def crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    with open(CRDS / CRD_FILES[(api_version, kind)], encoding="utf-8") as file:
        crd = yaml.load(file, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    version = api_version.split("/", 1)[1]
    schema = next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v["name"] == version)
    return jsonschema.Draft7Validator(closed(schema))


def closed(schema: dict) -> dict:
    """The schema with ``additionalProperties: false`` wherever an object lists its properties and
    says nothing about others, except under x-kubernetes-preserve-unknown-fields (which keeps them)."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for key, value in node.items():
            if key == "properties":
                for child in value.values():
                    walk(child)
            elif key in ("items", "additionalProperties", "allOf", "anyOf", "oneOf", "not"):
                walk(value)

    walk(schema)
    return schema


def _schema_problems(manifest: dict, validator) -> list[str]:
    problems = []
    for error in sorted(validator.iter_errors(manifest), key=lambda e: [str(p) for p in e.absolute_path]):
        path = _path(error.absolute_path)
        if error.validator == "additionalProperties" and error.validator_value is False:
            extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
            known = ", ".join(sorted(error.schema.get("properties", {})))
            problems.append(
                f"{path}: unknown field{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))} (known: {known})"
            )
        else:
            problems.append(f"{path}: {error.message}")
    return problems


def _webhook_problems(manifest: dict) -> list[str]:
    kind = manifest["kind"]
    field, replica_types, container = REPLICAS[kind]
    spec = manifest.get("spec") or {}
    replicas = spec.get(field) or {}
    problems = []
    if not replicas:
        problems.append(f"spec.{field}: at least one replica spec is required")
    name = (manifest.get("metadata") or {}).get("name") or ""
    for replica_type, replica in replicas.items():
        path = f"spec.{field}.{replica_type}"
        if replica_type not in replica_types:
            problems.append(f"{path}: unknown replica type (use {', '.join(sorted(replica_types))})")
        if not isinstance(replica, dict):
            continue
        count = replica.get("replicas")
        if kind in ("PyTorchJob", "MPIJob") and replica_type in ("Master", "Launcher") and count != 1:
            problems.append(f"{path}.replicas: must be 1 (is {count!r})")
        elif count is not None and isinstance(count, int) and count < 1:
            problems.append(f"{path}.replicas: must be at least 1 (is {count})")
        restart = replica.get("restartPolicy")
        allowed = MPI_RESTART_POLICIES if kind == "MPIJob" else RESTART_POLICIES
        if restart is not None and restart not in allowed:
            problems.append(f"{path}.restartPolicy: {restart!r} is not one of {', '.join(sorted(allowed))}")
        pod = (replica.get("template") or {}).get("spec") or {}
        containers = pod.get("containers") or []
        if not containers:
            problems.append(f"{path}.template.spec.containers: at least one container is required")
        for index, item in enumerate(containers):
            if isinstance(item, dict) and not item.get("image"):
                problems.append(f"{path}.template.spec.containers[{index}].image: required")
        names = [item.get("name") for item in containers if isinstance(item, dict)]
        if container and container not in names:
            problems.append(
                f"{path}.template.spec.containers: the {kind} operator runs the container named "
                f"{container!r}; found {', '.join(map(repr, names)) or 'none'}"
            )
        problems += _pod_problems(pod, f"{path}.template.spec")
        problems += _metadata_problems(
            kind, (replica.get("template") or {}).get("metadata") or {}, f"{path}.template.metadata"
        )
        if kind in POD_SUFFIX and isinstance(count, int):
            pod_name = name + POD_SUFFIX[kind].format(n=max(count - 1, 0))
            if len(pod_name) > 63:
                problems.append(
                    f"metadata.name: too long: its pods would be called {pod_name!r} "
                    f"({len(pod_name)} characters, at most 63)"
                )
    if kind == "MPIJob":
        if "Launcher" not in replicas:
            problems.append(f"spec.{field}.Launcher: required")
        for key in ("slotsPerWorker", "sshAuthMountPath"):
            if spec.get(key) in (None, ""):
                problems.append(f"spec.{key}: required")
        if not (spec.get("runPolicy") or {}).get("cleanPodPolicy"):
            problems.append("spec.runPolicy.cleanPodPolicy: required")
    return list(dict.fromkeys(problems))


def _pod_problems(pod: dict, path: str) -> list[str]:
    problems = []
    every = [("initContainers", c) for c in pod.get("initContainers") or []] + [
        ("containers", c) for c in pod.get("containers") or []
    ]
    seen = set()
    for group, item in every:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not DNS_1123_LABEL.match(name) or len(name) > 63:
            problems.append(f"{path}.{group}: container name {name!r} must be a DNS-1123 label")
        elif name in seen:
            problems.append(f"{path}.{group}: container name {name!r} is used twice")
        seen.add(name)
    volumes = {v.get("name") for v in pod.get("volumes") or [] if isinstance(v, dict)}
    for group, item in every:
        for mount in (item.get("volumeMounts") or []) if isinstance(item, dict) else []:
            if isinstance(mount, dict) and mount.get("name") not in volumes:
                problems.append(
                    f"{path}.{group}[{item.get('name')}].volumeMounts: no volume named {mount.get('name')!r}"
                )
    return problems


# ------------------------------------------------------------------------------------- core kinds


def _core_problems(manifest: dict) -> list[str]:
    try:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [exc.message]
    except kubernetes_validate.ValidationError as exc:
        return [f"{_path(exc.absolute_path)}: {exc.message}"]
    if manifest["kind"] == "Job":
        template = (manifest.get("spec") or {}).get("template") or {}
        return _pod_problems(template.get("spec") or {}, "spec.template.spec") + _metadata_problems(
            "Job", template.get("metadata") or {}, "spec.template.metadata"
        )
    if manifest["kind"] == "NetworkPolicy":
        return _network_policy_problems(manifest.get("spec") or {})
    return []


def _network_policy_problems(spec: dict) -> list[str]:
    problems = []
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        for index, rule in enumerate(spec.get(direction) or []):
            for peer_index, peer in enumerate(rule.get(peers_key) or []):
                block = peer.get("ipBlock")
                if block is None:
                    continue
                path = f"spec.{direction}[{index}].{peers_key}[{peer_index}].ipBlock"
                try:
                    cidr = ipaddress.ip_network(block["cidr"], strict=False)
                except ValueError:
                    problems.append(f"{path}.cidr: {block['cidr']!r} is not a CIDR")
                    continue
                for position, value in enumerate(block.get("except") or []):
                    try:
                        inner = ipaddress.ip_network(value, strict=False)
                    except ValueError:
                        problems.append(f"{path}.except[{position}]: {value!r} is not a CIDR")
                        continue
                    if inner.version != cidr.version or not inner.subnet_of(cidr) or inner == cidr:
                        problems.append(
                            f"{path}.except[{position}]: {value!r} must be strictly within {block['cidr']!r}"
                        )
    return problems


# --------------------------------------------------------------------------------- names and labels


def _metadata_problems(kind: str, metadata: dict, path: str) -> list[str]:
    problems = []
    name = metadata.get("name")
    if path == "metadata":
        pattern, what = (
            (DNS_1123_SUBDOMAIN, "a DNS-1123 subdomain")
            if kind == "PriorityClass"
            else (DNS_1123_LABEL, "a DNS-1123 label")
            if kind in ("Namespace", "PersistentVolumeClaim", "ResourceQuota", "Job")
            else (DNS_1035, "a DNS-1035 label")
        )
        limit = 253 if kind == "PriorityClass" else 63
        if not isinstance(name, str) or not pattern.match(name) or len(name) > limit:
            problems.append(f"{path}.name: {name!r} must be {what} of at most {limit} characters")
    namespace = metadata.get("namespace")
    if namespace is not None and (
        not isinstance(namespace, str) or not DNS_1123_LABEL.match(namespace) or len(namespace) > 63
    ):
        problems.append(f"{path}.namespace: {namespace!r} must be a DNS-1123 label of at most 63 characters")
    for key, value in (metadata.get("labels") or {}).items():
        problems += [f"{path}.labels: {problem}" for problem in label_problems(key, value)]
    return problems


def label_problems(key: str, value) -> list[str]:
    problems = []
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_1123_SUBDOMAIN.match(prefix)):
        problems.append(f"key {key!r}: the prefix must be a DNS-1123 subdomain")
    if not name or len(name) > 63 or not LABEL_NAME.match(name):
        problems.append(
            f"key {key!r}: the name must be 1-63 characters, alphanumeric at both ends, with '-', '_', '.' inside"
        )
    if not isinstance(value, str):
        problems.append(f"{key}: the value must be a string (is {value!r})")
    elif value and (len(value) > 63 or not LABEL_NAME.match(value)):
        problems.append(
            f"{key}: value {value!r} must be at most 63 characters, alphanumeric at both ends, "
            "with '-', '_', '.' inside"
        )
    return problems


def _path(parts) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top)"
