"""What the platform/ tests share (tests/test_platform_*.py): where things are, the RBAC table the portal
needs, and readers for the kustomizations, env files, the Procfile, the Dockerfile and the settings names
config/ reads. Not a test module.
"""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent
PLATFORM = ROOT / "platform"
KUSTOMIZE = PLATFORM / "kustomize"
BASE, OVERLAY = KUSTOMIZE / "base", KUSTOMIZE / "overlays" / "example"
KUSTOMIZATIONS = sorted(KUSTOMIZE.rglob("kustomization.yaml"))
KUBERNETES_VERSION = "1.32"  # the oldest Kubernetes the portal supports (as clusters/manifest_validation.py)
PORTAL_IMAGE = "gpu-portal"  # the base's image name; overlays point it at a registry
PORTAL_UID = 10001

# Exactly what the portal touches on a cluster: (API group, resource) -> verbs.
RBAC = {
    "gpu-portal-cluster": {
        ("", "namespaces"): {"get", "list", "create", "patch"},
        ("scheduling.k8s.io", "priorityclasses"): {"get", "list", "create", "patch"},
    },
    "gpu-portal-workloads": {
        ("", "resourcequotas"): {"get", "list", "create", "patch"},
        ("networking.k8s.io", "networkpolicies"): {"get", "list", "create", "patch"},
        ("", "persistentvolumeclaims"): {"get", "list", "create"},
        ("", "pods"): {"get", "list", "watch"},
        ("", "pods/log"): {"get"},
        ("kubeflow.org", "pytorchjobs"): {"get", "list", "watch", "create", "patch", "delete"},
        ("kubeflow.org", "tfjobs"): {"get", "list", "watch", "create", "patch", "delete"},
        ("kubeflow.org", "mpijobs"): {"get", "list", "watch", "create", "patch", "delete"},
        ("batch", "jobs"): {"get", "list", "watch", "create", "patch", "delete"},
        ("", "configmaps"): {"get", "create", "delete"},
        ("serving.kserve.io", "inferenceservices"): {"get", "list", "watch", "create", "patch", "delete"},
        ("apps", "deployments"): {"get", "list", "watch", "create", "patch", "delete"},
        ("", "services"): {"get", "list", "watch", "create", "patch", "delete"},
    },
}


def load_documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def kustomization(path: Path) -> dict:
    return yaml.safe_load((path / "kustomization.yaml").read_text())


def read_env_file(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            pairs[name.strip()] = value
    return pairs


def validate(doc: dict) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def resource_files(folder: Path) -> list[Path]:
    return [folder / entry for entry in kustomization(folder).get("resources", []) if (folder / entry).is_file()]


def procfile() -> dict[str, str]:
    lines = (PLATFORM / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip() and not line.startswith("#"))


def names_the_code_reads() -> set[str]:
    """Setting names read through core/env.py (config/), plus those the Procfile's command lines use."""
    code = "\n".join(path.read_text() for path in (ROOT / "config").glob("*.py"))
    names = set(re.findall(r"\benv\.(?:str|bool|int|list|rate|url|raw)\(\s*\"([A-Z][A-Z0-9_]*)\"", code))
    names |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", (PLATFORM / "Procfile").read_text()))
    assert {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "PORTAL_BIND"} <= names  # the reader finds them
    return names | {f"{name}_FILE" for name in names}  # core/env.py: any setting may come from a file


def container_of(path: Path, kind: str, name: str) -> dict:
    (doc,) = [d for d in load_documents(path) if d["kind"] == kind]
    return next(c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def env_sources(container: dict) -> dict[str, dict | str]:
    return {
        item["name"]: item.get("valueFrom", {}).get("secretKeyRef") or item.get("value") for item in container["env"]
    }


def dockerfile() -> list[tuple[str, ...]]:
    text = re.sub(r"\\\n", " ", (PLATFORM / "Dockerfile").read_text())
    return [
        tuple(line.split(None, 1)) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def instruction(name: str) -> list[str]:
    return [argument for keyword, argument in dockerfile() if keyword.upper() == name]


def dockerfile_user() -> int:
    (user,) = instruction("USER")
    return int(user.split(":")[0])
