"""Checking an image build request against the rules a person can act on.

Every problem is collected and reported at once, per field (API.md: 400 with {"field": ["message", ...]}).
Types are checked by the API's input serializer first; this module checks meaning: membership, the
Dockerfile, the catalogue name, the repository, and what the cluster can do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from accounts import selectors as account_selectors
from accounts.models import Department
from clusters.k8s import ClusterSettings, ManifestError
from clusters.manifest_validation import DNS_1035
from clusters.models import Cluster
from clusters.services import cluster_health, cluster_refusal
from core.code_url import GIT_REF, code_url_problem
from core.errors import InvalidInput
from core.requirements import pip_requirements
from images.manifests import BuildSettings, BuildSetupError
from images.models import FrameworkImage, ImageBuild

MAX_NAME = 40
MAX_DOCKERFILE = 64 * 1024
MAX_BASE_PACKAGES = 200
FROM_LINE = re.compile(r"^\s*FROM\s+\S+", re.IGNORECASE | re.MULTILINE)
# A relative path inside the repository: no leading '/', no '..' component, nothing a shell or Kaniko's
# "url#ref" syntax could read differently.
REPO_PATH = re.compile(r"^(?!/)(?!-)(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9._/@+-]{1,300}$")


@dataclass
class CleanBuild:
    name: str
    department: Department
    cluster: Cluster
    framework: str
    base_packages: list[str]
    dockerfile: str
    code_url: str
    code_ref: str
    dockerfile_path: str
    context_path: str


def check_build(*, user, data: dict, type_errors: dict | None = None) -> CleanBuild:
    """Turn typed input into a CleanBuild, or raise InvalidInput naming every problem."""
    errors: dict[str, list] = {field: list(messages) for field, messages in (type_errors or {}).items()}

    def fail(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    name = data.get("name")
    if name is not None:
        _name(name, fail)

    department = None
    if data.get("department") is not None:
        department = account_selectors.department_for_input(user=user, slug=data["department"], errors=errors)

    cluster = _cluster(data.get("cluster") or "", fail) if "cluster" not in errors else None

    dockerfile = data.get("dockerfile") or ""
    code_url = (data.get("code_url") or "").strip()
    if "dockerfile" not in errors and "code_url" not in errors:
        if dockerfile.strip() and code_url:
            fail("dockerfile", "Give either a Dockerfile or a repository (code_url), not both.")
        elif not dockerfile.strip() and not code_url:
            fail("dockerfile", "Paste a Dockerfile, or give the repository that holds one in code_url.")
        elif dockerfile.strip():
            _dockerfile(dockerfile, fail)
        else:
            _repository(data, code_url, fail)

    framework = data.get("framework") or FrameworkImage.Framework.PYTHON
    if framework not in FrameworkImage.Framework.values:
        fail("framework", f"Choose one of: {', '.join(FrameworkImage.Framework.values)} (not {framework!r}).")
    base_packages = pip_requirements(
        data.get("base_packages") or [], fail, field="base_packages", limit=MAX_BASE_PACKAGES, too_many=""
    )

    if errors:
        raise InvalidInput(errors)
    return CleanBuild(
        name=name,
        department=department,
        cluster=cluster,
        framework=framework,
        base_packages=base_packages,
        dockerfile=dockerfile if dockerfile.strip() else "",
        code_url=code_url,
        code_ref=(data.get("code_ref") or "").strip() if code_url else "",
        dockerfile_path=(data.get("dockerfile_path") or "Dockerfile").strip() if code_url else "Dockerfile",
        context_path=(data.get("context_path") or "").strip().strip("/") if code_url else "",
    )


def build_settings(cluster: Cluster) -> tuple[ClusterSettings, BuildSettings]:
    """How builds use a cluster (its settings JSON). Raises BuildSetupError or ManifestError naming a missing or
    wrong setting."""
    return (
        ClusterSettings.from_cluster(cluster.name, cluster.settings),
        BuildSettings.from_settings(cluster.name, cluster.settings),
    )


def _name(name: str, fail) -> None:
    if len(name) > MAX_NAME:
        fail("name", f"Use at most {MAX_NAME} characters (this name has {len(name)}).")
    elif not DNS_1035.match(name):
        fail(
            "name",
            "Use lower-case letters, digits and '-', starting with a letter and not ending with '-' "
            "(it becomes part of the image's registry path).",
        )
    elif FrameworkImage.objects.filter(name=name).exists():
        fail("name", f"The catalogue already has an image called {name!r}; choose another name.")
    elif ImageBuild.objects.filter(name=name, status__in=ImageBuild.ACTIVE).exists():
        fail("name", f"Another build is already making an image called {name!r}; choose another name or cancel it.")


def _cluster(name: str, fail) -> Cluster | None:
    if name:
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            fail("cluster", f"No cluster called {name!r}; see GET /api/v1/clusters/.")
            return None
    else:
        kubernetes = Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES).order_by("pk")
        usable = [c for c in kubernetes if cluster_health(c).takes_builds]  # the stored health: no network call here
        cluster = (
            next((c for c in usable if c.settings.get("build_registry")), None)
            or next((c for c in kubernetes if c.settings.get("build_registry")), None)
            or next(iter(usable), None)
            or kubernetes.first()
        )
        if cluster is None:
            fail("cluster", "Image builds need a Kubernetes cluster, and this portal has none; ask a platform admin.")
            return None
    if cluster.backend != Cluster.Backend.KUBERNETES:
        fail("cluster", f"Image builds need a Kubernetes cluster; cluster {cluster.name} runs jobs as local processes.")
        return None
    refusal = cluster_refusal(cluster, what="image builds")
    if refusal:
        fail("cluster", refusal)
        return None
    try:
        build_settings(cluster)
    except (BuildSetupError, ManifestError) as exc:
        fail("cluster", str(exc))
        return None
    return cluster


def _dockerfile(text: str, fail) -> None:
    size = len(text.encode())
    if size > MAX_DOCKERFILE:
        fail(
            "dockerfile",
            f"Keep the Dockerfile under {MAX_DOCKERFILE // 1024} KiB (it has {size // 1024} KiB); "
            "build from a repository for larger contexts.",
        )
    elif "\x00" in text:
        fail("dockerfile", "The Dockerfile contains a NUL character.")
    elif not FROM_LINE.search(text):
        fail("dockerfile", "A Dockerfile needs a FROM line naming its base image, e.g. 'FROM python:3.11-slim'.")


def _repository(data: dict, url: str, fail) -> None:
    problem = code_url_problem(url, allow_local=False, https_only=True)
    if problem:
        fail("code_url", problem)
    ref = (data.get("code_ref") or "").strip()
    if ref and not GIT_REF.match(ref):
        fail(
            "code_ref",
            "Give a branch, a tag as refs/tags/<tag>, or a commit SHA (letters, digits, '.', '_', '/', "
            "'-'; not starting with '-').",
        )
    for field, default in (("dockerfile_path", "Dockerfile"), ("context_path", "")):
        value = (
            (data.get(field) or default).strip().strip("/")
            if field == "context_path"
            else (data.get(field) or default).strip()
        )
        if value and not REPO_PATH.match(value):
            fail(
                field,
                "Give a path relative to the repository's root (letters, digits, '.', '_', '-', '/'; "
                "no '..', not starting with '/').",
            )
