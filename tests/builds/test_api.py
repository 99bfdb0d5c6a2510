"""Submitting, listing, reading and cancelling image builds through the REST API: every rule a person can
break, and who may see and do what (alice: vision member, carol: vision dept_admin, bob: nlp, admin)."""

import pytest

from accounts.models import AuditEvent, Department
from clusters.models import Cluster
from images.models import FrameworkImage, ImageBuild
from tests.builds.conftest import DOCKERFILE

MINIMAL = {"name": "torch-audio", "department": "vision", "dockerfile": DOCKERFILE}


def submit(world, user, **fields):
    return world.api(user).post("/api/v1/image-builds/", {**MINIMAL, **fields}, format="json")


def test_it_queues_a_pasted_dockerfile_build(world, cluster):
    response = submit(world, world.alice, base_packages=["torch==2.4.0"], framework="pytorch")
    assert response.status_code == 201, response.json()
    build = response.json()
    assert {
        k: build[k]
        for k in (
            "name",
            "department",
            "cluster",
            "framework",
            "source",
            "status",
            "requested_by",
            "image",
            "base_packages",
        )
    } == {
        "name": "torch-audio",
        "department": "vision",
        "cluster": "k8s",
        "framework": "pytorch",
        "source": "dockerfile",
        "status": "queued",
        "requested_by": "alice",
        "image": None,
        "base_packages": ["torch==2.4.0"],
    }
    assert build["logs_url"] == f"/api/v1/image-builds/{build['id']}/logs/"
    assert AuditEvent.objects.filter(action="build.submit", actor=world.alice).count() == 1


def test_it_reports_every_problem_at_once(world, cluster):
    FrameworkImage.objects.create(
        name="taken", framework="python", image="x/y:1", department=Department.objects.get(slug="nlp")
    )
    body = {
        "name": "taken",
        "department": "nlp",
        "framework": "cobol",
        "base_packages": ["numpy=1"],
        "dockerfile": "RUN echo hi\n",
        "tag": "v1",
    }
    response = world.api(world.alice).post("/api/v1/image-builds/", body, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert errors == {
        "name": ["The catalogue already has an image called 'taken'; choose another name."],
        "department": ["You are not a member of a department called 'nlp'."],
        "framework": ["Choose one of: python, pytorch, tensorflow, jax (not 'cobol')."],
        "base_packages": [errors["base_packages"][0]],
        "dockerfile": ["A Dockerfile needs a FROM line naming its base image, e.g. 'FROM python:3.11-slim'."],
        "tag": ["Unknown field."],
    }
    assert errors["base_packages"][0].startswith("Item 1 ('numpy=1') is not a valid pip requirement")
    assert ImageBuild.objects.count() == 0


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (
            {"name": "Torch_Audio"},
            "name",
            "Use lower-case letters, digits and '-', starting with a letter and not ending "
            "with '-' (it becomes part of the image's registry path).",
        ),
        ({"dockerfile": ""}, "dockerfile", "Paste a Dockerfile, or give the repository that holds one in code_url."),
        (
            {"code_url": "https://git.example.com/team/images.git"},
            "dockerfile",
            "Give either a Dockerfile or a repository (code_url), not both.",
        ),
        (
            {"dockerfile": "FROM x\n" + "#" * 70_000},
            "dockerfile",
            "Keep the Dockerfile under 64 KiB (it has 68 KiB); build from a repository for larger contexts.",
        ),
        (
            {"dockerfile": "", "code_url": "git@github.com:team/images.git"},
            "code_url",
            "Kaniko fetches repositories over https; give an https:// URL, e.g. https://git.example.com/team/images.git.",
        ),
        (
            {"dockerfile": "", "code_url": "https://git.example.com/x.git", "code_ref": "--upload-pack=evil"},
            "code_ref",
            "Give a branch, a tag as refs/tags/<tag>, or a commit SHA (letters, digits, '.', '_', '/', '-'; not starting with '-').",
        ),
        (
            {"dockerfile": "", "code_url": "https://git.example.com/x.git", "context_path": "../../etc"},
            "context_path",
            "Give a path relative to the repository's root (letters, digits, '.', '_', '-', '/'; no '..', not starting with '/').",
        ),
        (
            {"cluster": "local"},
            "cluster",
            "Image builds need a Kubernetes cluster; cluster local runs jobs as local processes.",
        ),
        ({"cluster": "mars"}, "cluster", "No cluster called 'mars'; see GET /api/v1/clusters/."),
    ],
)
def test_it_says_how_to_fix_each_field(world, cluster, fields, field, message):
    response = submit(world, world.alice, **fields)
    assert response.status_code == 400
    assert response.json()[field] == [message]


def test_it_needs_a_registry_on_the_cluster(world, cluster):
    cluster.settings = {"kube_url": "http://127.0.0.1:9"}
    cluster.save()
    response = submit(world, world.alice)
    assert response.status_code == 400
    assert response.json()["cluster"] == [
        "Cluster k8s has no registry to push built images to: a platform admin sets build_registry in its settings "
        '(e.g. "registry.example.com/portal").'
    ]


def test_it_needs_a_kubernetes_cluster_to_exist(world):
    response = submit(world, world.alice)
    assert response.status_code == 400
    assert response.json()["cluster"] == [
        "Image builds need a Kubernetes cluster, and this portal has none; ask a platform admin."
    ]


def test_it_keeps_one_active_build_per_name(world, cluster):
    assert submit(world, world.alice).status_code == 201
    response = submit(world, world.carol)
    assert response.status_code == 400
    assert response.json()["name"] == [
        "Another build is already making an image called 'torch-audio'; choose another name or cancel it."
    ]


def test_it_builds_from_a_repository(world, cluster):
    response = submit(
        world,
        world.bob,
        department="nlp",
        dockerfile="",
        code_url="https://git.example.com/nlp/images.git",
        code_ref="main",
        context_path="jax/",
        dockerfile_path="Dockerfile.gpu",
    )
    assert response.status_code == 201, response.json()
    build = response.json()
    assert (build["source"], build["code_ref"], build["context_path"], build["dockerfile_path"]) == (
        "git",
        "main",
        "jax",
        "Dockerfile.gpu",
    )


# --- tenancy ---------------------------------------------------------------------------


@pytest.fixture
def build(world, cluster):
    response = submit(world, world.alice)
    assert response.status_code == 201
    return response.json()


def test_outsiders_see_no_trace_of_a_build(world, build):
    bob = world.api(world.bob)
    assert bob.get("/api/v1/image-builds/").json()["results"] == []
    for url in (f"/api/v1/image-builds/{build['id']}/", f"/api/v1/image-builds/{build['id']}/logs/"):
        assert bob.get(url).status_code == 404
    assert bob.post(f"/api/v1/image-builds/{build['id']}/cancel/").status_code == 404
    assert world.api().get("/api/v1/image-builds/").status_code == 401
    assert ImageBuild.objects.get().status == "queued"


@pytest.mark.parametrize("who", ["alice", "carol", "admin"])
def test_members_and_admins_see_a_build(world, build, who):
    client = world.api(getattr(world, who))
    assert [b["id"] for b in client.get("/api/v1/image-builds/").json()["results"]] == [build["id"]]
    assert client.get(f"/api/v1/image-builds/{build['id']}/").json()["name"] == "torch-audio"
    logs = client.get(f"/api/v1/image-builds/{build['id']}/logs/")
    assert (logs.status_code, logs["Content-Type"], logs.content) == (200, "text/plain; charset=utf-8", b"")


def test_only_the_requester_or_a_department_admin_cancels(world, cluster, build):
    from django.contrib.auth import get_user_model

    from accounts.models import Membership

    dave = get_user_model().objects.create_user("dave")
    Membership.objects.create(user=dave, department=Department.objects.get(slug="vision"))
    response = world.api(dave).post(f"/api/v1/image-builds/{build['id']}/cancel/")
    assert response.status_code == 403
    assert response.json()["detail"] == "Only alice (who asked for this build) or an admin of vision can cancel it."
    response = world.api(world.carol).post(f"/api/v1/image-builds/{build['id']}/cancel/")
    assert (response.status_code, response.json()["status"], response.json()["message"]) == (
        200,
        "cancelled",
        "Cancelled by carol.",
    )
    again = world.api(world.alice).post(f"/api/v1/image-builds/{build['id']}/cancel/")
    assert (again.status_code, again.json()) == (
        409,
        {"detail": f"Build {build['id']} has already cancelled; there is nothing to cancel."},
    )
    assert AuditEvent.objects.filter(action="build.cancel", actor=world.carol).count() == 1


@pytest.mark.parametrize("who", ["alice", "admin"])
def test_the_requester_and_platform_admins_cancel(world, build, who):
    response = world.api(getattr(world, who)).post(f"/api/v1/image-builds/{build['id']}/cancel/")
    assert (response.status_code, response.json()["status"]) == (200, "cancelled")


def test_platform_admins_build_for_any_department_and_members_only_for_theirs(world, cluster):
    assert submit(world, world.admin, department="nlp", name="nlp-tools").status_code == 201
    assert submit(world, world.carol, department="nlp", name="more-tools").json()["department"] == [
        "You are not a member of a department called 'nlp'."
    ]
    assert Cluster.objects.get(name="k8s").image_builds.count() == 1
