"""The list endpoints' query filters (django-filter FilterSets): they narrow what the caller may see, never widen it,
answer as the hand-parsed filters did, and are described in the OpenAPI document.

vision: alice (member), carol (dept_admin); nlp: bob (member); admin: platform admin.
"""

from __future__ import annotations

import pytest

from accounts.models import Department
from clusters.models import Cluster
from images.models import ImageBuild
from models_registry.models import RegisteredModel
from serving.models import Deployment
from webhooks import services as webhook_services

JOB = {"code_url": "https://git.example.com/r.git", "command": "python train.py"}


def submit(world, user, name, department, **fields):
    response = world.api(user).post(
        "/api/v1/jobs/", {**JOB, "name": name, "department": department, **fields}, format="json"
    )
    assert response.status_code == 201, response.json()
    return response.json()


def names(world, user, url):
    response = world.api(user).get(url)
    assert response.status_code == 200, response.content
    return sorted(item.get("name", item.get("id")) for item in response.json()["results"])


@pytest.fixture
def jobs(world):
    return {
        "resnet": submit(world, world.alice, "resnet", "vision", gpus_per_worker=8, max_runtime_seconds=3600),
        "bert": submit(world, world.bob, "bert", "nlp", max_runtime_seconds=600),
        "vit": submit(world, world.carol, "vit", "vision", gpus_per_worker=2),
    }


def test_job_filters_narrow_and_never_widen_the_callers_jobs(world, jobs):
    assert names(world, world.admin, "/api/v1/jobs/") == ["bert", "resnet", "vit"]
    assert names(world, world.admin, "/api/v1/jobs/?department=nlp") == ["bert"]
    assert names(world, world.admin, "/api/v1/jobs/?submitted_by=carol") == ["vit"]
    assert names(world, world.admin, "/api/v1/jobs/?search=BER") == ["bert"]  # icontains
    assert names(world, world.admin, "/api/v1/jobs/?search=train.py") == ["bert", "resnet", "vit"]  # the command
    statuses = {
        job["name"]: world.api(world.admin).get(f"/api/v1/jobs/{job['id']}/").json()["status"] for job in jobs.values()
    }
    queued = sorted(name for name, status in statuses.items() if status == "queued")
    assert names(world, world.admin, "/api/v1/jobs/?status=queued") == queued
    everything = "/api/v1/jobs/?status=queued,admitted,running,starting"
    assert names(world, world.admin, everything) == ["bert", "resnet", "vit"]
    assert names(world, world.admin, "/api/v1/jobs/?status=nonsense") == []  # unknown values match nothing, as before
    # alice sees vision only: no filter reaches nlp's jobs
    assert names(world, world.alice, "/api/v1/jobs/") == ["resnet", "vit"]
    assert names(world, world.alice, "/api/v1/jobs/?department=nlp") == []
    assert names(world, world.alice, "/api/v1/jobs/?submitted_by=bob") == []
    assert names(world, world.alice, "/api/v1/jobs/?search=bert") == []
    assert names(world, world.bob, "/api/v1/jobs/?department=vision&status=queued") == []


def test_queue_filters_narrow_and_never_widen_the_callers_queue(world, jobs):
    everyone = names(world, world.admin, "/api/v1/queue/?cluster=local&gpu_type=sim")
    assert everyone == ["bert", "vit"]
    assert names(world, world.alice, "/api/v1/queue/?cluster=local&gpu_type=sim") == ["vit"]
    assert names(world, world.bob, "/api/v1/queue/?cluster=local") == ["bert"]
    assert names(world, world.bob, "/api/v1/queue/?gpu_type=A100") == []
    assert names(world, world.admin, "/api/v1/queue/?cluster=nowhere") == []
    # the queue is queued jobs only: it takes no status filter that could show others
    assert names(world, world.bob, "/api/v1/queue/?status=admitted&department=vision") == ["bert"]


def test_image_build_filters_narrow_and_never_widen(world):
    cluster = Cluster.objects.first()
    builds = [
        ("vis-a", "vision", world.alice, "queued"),
        ("vis-b", "vision", world.carol, "failed"),
        ("nlp-a", "nlp", world.bob, "queued"),
    ]
    for name, slug, user, status in builds:
        ImageBuild.objects.create(
            name=name,
            department=Department.objects.get(slug=slug),
            cluster=cluster,
            requested_by=user,
            status=status,
            dockerfile="FROM python:3.11-slim\n",
        )
    assert names(world, world.admin, "/api/v1/image-builds/?department=nlp") == ["nlp-a"]
    assert names(world, world.admin, "/api/v1/image-builds/?status=queued") == ["nlp-a", "vis-a"]
    assert names(world, world.admin, "/api/v1/image-builds/?status= failed ,,") == ["vis-b"]  # stripped, as before
    assert names(world, world.admin, "/api/v1/image-builds/?status=,") == ["nlp-a", "vis-a", "vis-b"]
    assert names(world, world.alice, "/api/v1/image-builds/") == ["vis-a", "vis-b"]
    assert names(world, world.alice, "/api/v1/image-builds/?department=nlp") == []
    assert names(world, world.bob, "/api/v1/image-builds/?department=vision&status=failed") == []


def test_model_filters_narrow_and_never_widen(world):
    vision, nlp = Department.objects.get(slug="vision"), Department.objects.get(slug="nlp")
    RegisteredModel.objects.create(name="filter-resnet", department=vision)
    RegisteredModel.objects.create(name="filter-bert", department=nlp)
    assert names(world, world.admin, "/api/v1/models/?search=FILTER-") == ["filter-bert", "filter-resnet"]
    assert names(world, world.admin, "/api/v1/models/?department=nlp&search=filter") == ["filter-bert"]
    assert names(world, world.alice, "/api/v1/models/?search=filter") == ["filter-resnet"]
    assert names(world, world.alice, "/api/v1/models/?department=nlp") == []
    assert names(world, world.bob, "/api/v1/models/?search=resnet") == []


def test_deployment_filter_narrows_and_never_widens(world):
    vision, nlp = Department.objects.get(slug="vision"), Department.objects.get(slug="nlp")
    Deployment.objects.create(
        name="filter-vis",
        department=vision,
        model=RegisteredModel.objects.create(name="filter-vis-model", department=vision),
    )
    Deployment.objects.create(
        name="filter-nlp", department=nlp, model=RegisteredModel.objects.create(name="filter-nlp-model", department=nlp)
    )
    assert "filter-nlp" in names(world, world.admin, "/api/v1/deployments/?department=nlp")
    assert "filter-vis" not in names(world, world.admin, "/api/v1/deployments/?department=nlp")
    assert "filter-vis" in names(world, world.alice, "/api/v1/deployments/")
    assert names(world, world.alice, "/api/v1/deployments/?department=nlp") == []
    assert names(world, world.bob, "/api/v1/deployments/?department=vision") == []


def test_webhook_filter_narrows_and_never_widens(world, settings):
    settings.PORTAL_WEBHOOK_ALLOW_PRIVATE = False
    for slug, actor in [("vision", world.carol), ("nlp", world.admin)]:
        webhook_services.webhook_create(
            actor=actor,
            department=Department.objects.get(slug=slug),
            name=f"hook-{slug}",
            url="https://hooks.example.com/portal",
            events=["job.failed"],
        )
    assert names(world, world.admin, "/api/v1/webhooks/?department=nlp") == ["hook-nlp"]
    assert names(world, world.alice, "/api/v1/webhooks/") == ["hook-vision"]
    assert names(world, world.alice, "/api/v1/webhooks/?department=nlp") == []
    assert names(world, world.bob, "/api/v1/webhooks/?department=vision") == []


FILTERS = {
    "/api/v1/jobs/": {"department", "status", "submitted_by", "search"},
    "/api/v1/queue/": {"cluster", "gpu_type"},
    "/api/v1/image-builds/": {"department", "status"},
    "/api/v1/models/": {"department", "search"},
    "/api/v1/deployments/": {"department"},
    "/api/v1/webhooks/": {"department"},
}


@pytest.mark.parametrize("path", FILTERS)
def test_the_openapi_document_lists_each_filter_as_a_string_query_parameter(world, path):
    schema = world.api(world.alice).get("/api/v1/schema/?format=json").json()
    parameters = {p["name"]: p for p in schema["paths"][path]["get"]["parameters"] if p["in"] == "query"}
    assert FILTERS[path] | {"page", "page_size"} == set(parameters)
    assert all(
        parameters[name]["schema"]["type"] == "string" and parameters[name].get("description") for name in FILTERS[path]
    )
