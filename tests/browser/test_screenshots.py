"""A full-page screenshot of every page of the portal a user can reach, in English and in Chinese (issue 17,
"Done when"), kept as the browser suite's artefacts: ``$PORTAL_DATA_ROOT/screenshots/<lang>-<page>.png``.

The pages are those of the URLconfs (config/urls.py, frontend/urls.py, frontend/urls_console.py,
webhooks/urls_console.py, models_registry/urls_ui.py, serving/urls_ui.py, images/urls_ui.py): each is opened
as the user who would open it, must answer the expected status and show the portal's header. A page about one
object is taken of the first such object the portal has; a model with a version and a finished image build are
made for this test when the portal has none (by a process of its own: this one may not touch the database while
the browser runs). The deployment page is taken by test_models_pages.py, whose deployment (and its model
servers) exists only there; run alone, this file names it as left out.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Portal, screenshot
from tests.browser.test_models_pages import in_portal
from tests.conftest import PASSWORD

LANGUAGES = {"en": "English", "zh": "简体中文"}
HTML_LANG = {"en": "en", "zh": "zh-hans"}


@dataclass(frozen=True)
class Shot:
    name: str
    path: str
    status: int = 200
    header: bool = True  # the portal's header; False: a page that is not the portal's own (the API docs)


def api_get(portal: Portal, token: str, path: str):
    request = urllib.request.Request(f"{portal.url}{path}", headers={"Authorization": f"Token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError:
        return None


def token_of(portal: Portal, username: str) -> str:
    request = urllib.request.Request(
        f"{portal.url}/api/v1/auth/token/",
        data=json.dumps({"username": username, "password": PASSWORD}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["token"]


def first(listing) -> dict | None:
    rows = listing.get("results", listing) if isinstance(listing, dict) else listing
    return rows[0] if rows else None


SEED = """
import json, sys

import django
django.setup()
from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts.models import Department
from clusters.models import Cluster
from images.models import ImageBuild
from models_registry.models import ModelVersion, RegisteredModel

given = json.loads(sys.argv[1])
alice = get_user_model().objects.get(username="alice")
vision = Department.objects.get(slug="vision")
if not RegisteredModel.objects.filter(department=vision).exists():
    model = RegisteredModel.objects.create(name=given["model"], department=vision, created_by=alice)
    ModelVersion.objects.create(
        model=model, version=1, artifact_uri="store://" + given["model"] + "/1/model.joblib",
        metrics={"accuracy/test": 0.91234567}, created_by=alice,
    )
if not ImageBuild.objects.filter(department=vision).exists():
    ImageBuild.objects.create(
        department=vision, cluster=Cluster.objects.order_by("name").first(), requested_by=alice,
        name=given["build"], dockerfile="FROM python:3.11", status=ImageBuild.Status.FAILED,
        message="The build pod was not scheduled.", finished_at=timezone.now(),
    )
"""

CLEAN_UP = """
import json, sys

import django
django.setup()
from images.models import ImageBuild
from models_registry.models import RegisteredModel

given = json.loads(sys.argv[1])
RegisteredModel.objects.filter(name=given["model"]).delete()
ImageBuild.objects.filter(name=given["build"]).delete()
"""


@pytest.fixture(scope="module")
def seeded(portal) -> Iterator[Portal]:
    names = {"model": "screenshot-model", "build": "screenshot-image"}
    in_portal(portal, SEED, **names)
    try:
        yield portal
    finally:
        in_portal(portal, CLEAN_UP, **names)


def object_pages(portal: Portal) -> tuple[list[Shot], list[str]]:
    """The pages of one object of each kind alice can see; the names of those left out for want of one."""
    token = token_of(portal, "alice")
    shots, missing = [], []
    model = first(api_get(portal, token, "/api/v1/models/") or [])
    if model:
        shots.append(Shot("model", f"/models/{model['name']}/"))
        version = first(api_get(portal, token, f"/api/v1/models/{model['name']}/versions/") or [])
        if version:
            shots.append(Shot("model-version", f"/models/{model['name']}/versions/{version['version']}/"))
        else:
            missing.append("model-version")
    else:
        missing += ["model", "model-version"]
    deployment = first(api_get(portal, token, "/api/v1/deployments/") or [])
    if deployment:
        shots.append(Shot("deployment", f"/deployments/{deployment['name']}/"))
    else:
        missing.append("deployment")
    build = first(api_get(portal, token, "/api/v1/image-builds/") or [])
    if build:
        shots.append(Shot("image-build", f"/images/builds/{build['id']}/"))
    else:
        missing.append("image-build")
    return shots, missing


def researcher_pages(portal: Portal) -> list[Shot]:
    return [
        Shot("home", "/"),
        Shot("jobs", "/jobs/"),
        Shot("job", f"/jobs/{portal.vision_job_id}/"),
        Shot("job-new", "/jobs/new/"),
        Shot("queue", "/queue/"),
        Shot("clusters", "/clusters/"),
        Shot("cluster", "/clusters/local/"),
        Shot("models", "/models/"),
        Shot("deployments", "/deployments/"),
        Shot("images", "/images/"),
        Shot("tokens", "/tokens/"),
        Shot("api-docs", "/api/v1/docs/", header=False),
        Shot("error-404", "/jobs/999999/", status=404),
        Shot("error-403", "/console/", status=403),  # the console, for a member
    ]


CONSOLE_PAGES = [
    Shot("console", "/console/"),
    Shot("console-members", "/console/departments/vision/members/"),
    Shot("console-quotas", "/console/departments/vision/quotas/"),
    Shot("console-storage", "/console/departments/vision/storage/"),
    Shot("console-loans", "/console/departments/vision/loans/"),
    Shot("console-webhooks", "/console/departments/vision/webhooks/"),
    Shot("console-priorities", "/console/priorities/"),
    Shot("console-usage", "/console/usage/?department=vision"),
    Shot("console-audit", "/console/audit/"),
    Shot("error-404-console", "/console/departments/nlp/quotas/", status=404),  # not carol's department
]


def switch_to(page: Page, language: str) -> None:
    page.get_by_role("button", name=LANGUAGES[language]).click()
    expect(page.locator("html")).to_have_attribute("lang", HTML_LANG[language])


def take(page: Page, language: str, shot: Shot) -> None:
    response = page.goto(shot.path)
    assert response is not None and response.status == shot.status, (shot, response and response.status)
    if shot.header:
        expect(page.locator("header.topbar .brand")).to_be_visible()
        expect(page.locator("html")).to_have_attribute("lang", HTML_LANG[language])
    else:
        expect(page.locator("body")).not_to_be_empty()
    screenshot(page, f"{language}-{shot.name}")


@pytest.mark.parametrize("language", ["en", "zh"])
def test_every_page_in_english_and_chinese_is_screenshotted(visitor, seeded, language, capsys):
    portal = seeded
    objects, missing = object_pages(portal)
    pages: list[tuple[str, Callable[[], list[Shot]]]] = [
        ("alice", lambda: researcher_pages(portal) + objects),
        ("carol", lambda: CONSOLE_PAGES),
    ]
    for username, shots in pages:
        page = visitor.sign_in(username)
        switch_to(page, language)
        for shot in shots():
            take(page, language, shot)
        if language != "en":
            switch_to(page, "en")  # the choice is the user's: leave English for the tests that follow

    anonymous = visitor.page()
    anonymous.goto("/login/")
    if language != "en":
        switch_to(anonymous, language)
    take(anonymous, language, Shot("login", "/login/"))
    if missing:
        with capsys.disabled():
            print(f"\nscreenshots left out ({language}), the portal has none yet: {', '.join(missing)}")
