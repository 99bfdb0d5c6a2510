"""The model version page (/models/<name>/versions/<n>/), the register form on the model page, and the deployment
page's live part, confirmations and history (the browser side: tests/browser/test_models_pages.py)."""

from __future__ import annotations

import re

import pytest

from accounts.models import Department
from models_registry.models import ModelAlias, ModelVersion, RegisteredModel
from serving import services as serving_services
from serving.models import Deployment, Variant
from tests.models_registry.test_registry import (
    COMMIT,
    create_model,
    registered,
    registry,  # noqa: F401 - fixture
    succeeded_job,
)
from tests.models_registry.test_serving import ab, create, portal, register  # noqa: F401 - fixture


def text(html: str) -> str:
    """The page's words, without tags and runs of white space: what a reader sees."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.fixture
def two_versions(registry, settings):
    """digits v1 (a folder artifact) and v2 (one file); v2 has the better accuracy, v1 the lower loss."""
    first = succeeded_job(
        registry,
        settings,
        files={"model/weights.bin": b"w" * 2048, "model/config.json": b"{}"},
        scalars={"accuracy/test": [0.87333336], "loss/train": [0.125]},
    )
    second = succeeded_job(registry, settings, scalars={"accuracy/test": [0.9375], "loss/train": [0.25]})
    create_model(registry)
    registered(registry, {"source_job": first.pk, "artifact_path": "model", "tags": {"dataset": "v1"}})
    registered(registry, {"source_job": second.pk, "artifact_path": "model.joblib"})
    return first, second


def test_the_version_page_shows_lineage_metrics_aliases_files_and_deployments(registry, two_versions, client):
    first, _second = two_versions
    version = ModelVersion.objects.get(version=1)
    ModelAlias.objects.create(model=version.model, name="champion", version=version)
    deployment = Deployment.objects.create(name="digits-live", department=version.model.department, model=version.model)
    Variant.objects.create(deployment=deployment, name="a", version=version, weight=100)
    client.force_login(registry.alice)

    html = client.get("/models/digits/versions/1/").content.decode()
    words = text(html)

    assert "digits version 1" in words
    assert f'<a href="/jobs/{first.pk}/">' in html
    assert f'href="https://git.example.com/team/digits/commit/{COMMIT}"' in html
    assert "https://git.example.com/team/digits.git @ main" in words
    assert "by alice" in words and "<time datetime=" in html
    # metrics to 4 significant digits; the best of the model's versions marked or named
    assert "accuracy/test 0.8733 v2 : 0.9375" in words
    assert "loss/train 0.125 this version is the best" in words
    assert '<span class="alias">champion</span>' in html and 'name="back" value="version"' in html
    assert '<span class="tag">dataset=v1</span>' in html
    assert "config.json 2 bytes weights.bin 2.0 KB" in words
    assert '<a href="/deployments/digits-live/">digits-live</a>' in html and "100%" in words

    second = text(client.get("/models/digits/versions/2/").content.decode())
    assert "model.joblib 7 bytes" in second and "No deployment serves this version." in second
    assert "accuracy/test 0.9375 this version is the best" in second


def test_alias_and_tag_forms_on_the_version_page_come_back_to_it(registry, two_versions, client):
    client.force_login(registry.alice)

    response = client.post("/models/digits/versions/2/alias/", {"alias": "champion", "back": "version"})
    assert response.status_code == 302 and response["Location"] == "/models/digits/versions/2/"
    assert ModelAlias.objects.get(name="champion").version.version == 2
    response = client.post("/models/digits/versions/2/tags/", {"key": "stage", "value": "prod", "back": "version"})
    assert response["Location"] == "/models/digits/versions/2/"
    assert (
        client.post("/models/digits/versions/2/tags/", {"key": "stage", "value": "x"})["Location"] == "/models/digits/"
    )


def test_the_version_page_is_the_departments_only(registry, two_versions, client):
    assert client.get("/models/digits/versions/1/")["Location"].startswith("/login/")
    client.force_login(registry.bob)  # nlp
    assert client.get("/models/digits/versions/1/").status_code == 404
    client.force_login(registry.alice)
    assert client.get("/models/digits/versions/9/").status_code == 404
    assert client.get("/models/nothing/versions/1/").status_code == 404


def test_every_version_number_links_to_its_page(registry, two_versions, client):
    client.force_login(registry.alice)
    detail = client.get("/models/digits/").content.decode()
    assert '<a href="/models/digits/versions/1/"><strong>v1</strong></a>' in detail
    assert '<a href="/models/digits/versions/2/"><strong>v2</strong></a>' in detail
    assert '<a href="/models/digits/versions/2/">v2</a>' in client.get("/models/").content.decode()


def test_the_register_form_offers_the_departments_succeeded_jobs_and_keeps_a_wrong_id(registry, two_versions, client):
    first, second = two_versions
    client.force_login(registry.alice)

    html = client.get("/models/digits/").content.decode()
    assert f'<option value="{second.pk}">digits' in html and f'<option value="{first.pk}">digits' in html
    assert '<select id="r-framework" name="framework">' in html

    refused = client.post("/models/digits/versions/", {"source_job": "forty-two", "artifact_path": "m.joblib"})
    html = refused.content.decode()
    assert refused.status_code == 400
    assert 'value="forty-two"' in html and 'value="m.joblib"' in html
    assert "Give the id of a succeeded job of the department, e.g. 42." in html
    assert ModelVersion.objects.count() == 2


def test_an_unknown_status_is_shown_as_words(registry, two_versions, client):
    ModelVersion.objects.filter(version=2).update(status="rolled_back")
    client.force_login(registry.alice)
    assert (
        '<span class="status status-rolled_back">rolled back</span>' in client.get("/models/digits/").content.decode()
    )


# --- Deployments ------------------------------------------------------------------------------------


def test_the_variant_table_refreshes_itself_and_promote_and_rollback_ask_first(portal, client):
    register("iris", 1), register("iris", 2)
    create(portal, ab("iris-ab", weights=(80, 20)), ready=False)
    client.force_login(portal.alice)

    page = client.get("/deployments/iris-ab/").content.decode()
    assert 'id="deployment-live" data-live hx-get="/deployments/iris-ab/" hx-trigger="every 3s, live"' in page
    assert 'data-confirm="Send all traffic to variant a (version 1)?' in page
    assert 'data-confirm="Send all traffic to variant b (version 2)?' in page
    assert "No earlier revision to roll back to." in page
    assert 'data-text-empty="No traffic yet' in page
    assert '<a href="/models/iris/versions/2/">v2</a>' in page

    part = client.get("/deployments/iris-ab/", headers={"HX-Request": "true"})
    html = part.content.decode()
    assert html.startswith('<div class="live" id="deployment-live"') and "<html" not in html
    assert "HX-Request" in part["Vary"]
    assert "Promote a to 100%" in html and "80%" in html

    history = client.get("/deployments/iris-ab/?part=history", headers={"HX-Request": "true"}).content.decode()
    assert history.startswith('<section class="card live" id="deployment-history"')


def test_the_history_keeps_every_revision_after_a_rollback(portal, client):
    register("iris", 1), register("iris", 2)
    create(portal, ab("iris-ab", weights=(80, 20)), ready=False)
    client.force_login(portal.alice)
    client.post("/deployments/iris-ab/promote/", {"variant": "b"})

    page = client.get("/deployments/iris-ab/").content.decode()
    assert 'data-confirm="Roll back to the variants of revision 1? Traffic moves at once."' in page

    client.post("/deployments/iris-ab/rollback/")
    page = client.get("/deployments/iris-ab/").content.decode()
    words = text(page[page.index('id="history-heading"') :])

    assert "revision 3 · rolled back" in text(page)  # the status as words
    assert re.search(r"3 current .* alice rollback to revision 1 a v1 80%, b v2 20%", words), words
    assert re.search(r"2 .* alice promote b a v1 0%, b v2 100%", words), words
    assert re.search(r"1 .* alice created a v1 80%, b v2 20%", words), words
    assert "No earlier revision to roll back to." in page  # the rollback stack is used up, the history is not
    assert [r["revision"] for r in serving_services.Deployment.objects.get().rollout["revisions"]] == [1, 2, 3]


def test_the_api_keeps_its_rollout_shape(portal):
    register("iris", 1), register("iris", 2)
    create(portal, ab("iris-ab"), ready=False)
    client = portal.api(portal.alice)
    client.post("/api/v1/deployments/iris-ab/promote/", {"variant": "a"}, format="json")
    rollout = client.get("/api/v1/deployments/iris-ab/").json()["rollout"]
    assert set(rollout) == {"history"} and [h["revision"] for h in rollout["history"]] == [1]
    assert Deployment.objects.get().status == "active"


def test_a_deployment_of_another_department_is_not_found(portal, client):
    register("iris", 1)
    RegisteredModel.objects.filter(name="iris").update(department=Department.objects.get(slug="vision"))
    create(
        portal,
        {
            "name": "solo",
            "department": "vision",
            "model": "iris",
            "variants": [{"name": "a", "version": 1, "weight": 100}],
        },
        ready=False,
    )
    client.force_login(portal.bob)
    assert client.get("/deployments/solo/").status_code == 404
    assert client.get("/deployments/solo/?part=history", headers={"HX-Request": "true"}).status_code == 404
