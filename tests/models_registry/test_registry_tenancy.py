"""The model registry: tenancy of every endpoint and page, and the pages themselves (helpers: test_registry.py)."""

from __future__ import annotations

import pytest

from models_registry.models import ModelVersion
from tests.models_registry.test_registry import (
    COMMIT,
    create_model,
    registered,
    registry,  # noqa: F401 - fixture
    succeeded_job,
)

# --- Tenancy: every endpoint and page ----------------------------------------------------------


@pytest.fixture
def one_version(registry, settings):
    job = succeeded_job(registry, settings)
    create_model(registry)
    registered(registry, {"source_job": job.pk, "artifact_path": "model.joblib"})
    return job


API_CALLS = [
    ("get", "/api/v1/models/digits/", None, 200),
    ("get", "/api/v1/models/digits/versions/", None, 200),
    ("post", "/api/v1/models/digits/versions/", "job", 201),
    ("get", "/api/v1/models/digits/versions/1/", None, 200),
    ("patch", "/api/v1/models/digits/versions/1/", {"tags": {"k": "v"}}, 200),
]


@pytest.mark.parametrize(("method", "url", "body", "ok"), API_CALLS)
def test_the_api_hides_a_model_from_outsiders_and_anonymous_callers(registry, one_version, method, url, body, ok):
    body = {"source_job": one_version.pk, "artifact_path": "model.joblib"} if body == "job" else body

    def call(user):
        return (
            getattr(registry.api(user), method)(url, body, format="json")
            if body
            else getattr(registry.api(user), method)(url)
        )

    assert call(None).status_code == 401
    assert call(registry.bob).status_code == 404
    assert call(registry.alice).status_code == ok
    assert call(registry.carol).status_code == ok
    assert call(registry.admin).status_code == ok


def test_the_model_list_shows_only_the_callers_departments(registry, one_version):
    assert registry.api(None).get("/api/v1/models/").status_code == 401
    assert registry.api(registry.bob).get("/api/v1/models/").json()["count"] == 0
    assert [m["name"] for m in registry.api(registry.alice).get("/api/v1/models/").json()["results"]] == ["digits"]
    assert [
        m["name"] for m in registry.api(registry.admin).get("/api/v1/models/?department=vision").json()["results"]
    ] == ["digits"]
    assert registry.api(registry.admin).get("/api/v1/models/?department=nlp").json()["count"] == 0


PAGES = [
    ("get", "/models/digits/", {}),
    ("get", "/models/digits/versions/1/", {}),
    ("post", "/models/digits/versions/1/alias/", {"alias": "champion"}),
    ("post", "/models/digits/versions/1/tags/", {"key": "k", "value": "v"}),
    ("post", "/models/digits/versions/", {"source_job": "job", "artifact_path": "model.joblib"}),
]


@pytest.mark.parametrize(("method", "url", "data"), PAGES)
def test_the_pages_hide_a_model_from_outsiders_and_send_anonymous_visitors_to_sign_in(
    registry, one_version, client, method, url, data
):
    # The job's own id: on PostgreSQL ids are not reused between tests, so "1" is nobody's job there.
    data = {key: one_version.pk if value == "job" else value for key, value in data.items()}
    response = getattr(client, method)(url, data)
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=")
    client.force_login(registry.bob)
    assert getattr(client, method)(url, data).status_code == 404
    for user in (registry.alice, registry.admin):
        client.force_login(user)
        assert getattr(client, method)(url, data).status_code == (200 if method == "get" else 302)


def test_the_models_page_lists_the_visible_models(registry, one_version, client):
    assert client.get("/models/").status_code == 302
    client.force_login(registry.bob)
    assert "/models/digits/" not in client.get("/models/").content.decode()
    client.force_login(registry.alice)
    html = client.get("/models/").content.decode()
    assert '<a href="/models/digits/">digits</a>' in html
    assert 'href="/models/" aria-current="page">Models</a>' in html


# --- The pages ---------------------------------------------------------------------------------


def test_the_model_page_compares_versions_and_links_their_lineage(registry, settings, client):
    first = succeeded_job(registry, settings, scalars={"accuracy/test": [0.5, 0.875]})
    second = succeeded_job(registry, settings, scalars={"accuracy/test": [0.9375], "loss/train": [0.125]})
    create_model(registry)
    registered(registry, {"source_job": first.pk, "artifact_path": "model.joblib"})
    registered(registry, {"source_job": second.pk, "artifact_path": "model.joblib", "tags": {"dataset": "v2"}})
    client.force_login(registry.alice)

    html = client.get("/models/digits/").content.decode()

    assert f'<a href="/jobs/{first.pk}/">' in html and f'<a href="/jobs/{second.pk}/">' in html
    assert f'href="https://git.example.com/team/digits/commit/{COMMIT}"' in html
    assert "dataset=v2" in html
    assert '<a href="/models/digits/versions/1/"><strong>v1</strong></a>' in html
    compare = html[html.index('id="metrics-heading"') :]
    # 4 significant digits, the best of each row marked (the higher accuracy; loss/train has one value only)
    assert (
        '<code>accuracy/test</code></th><td class="number"><span title="0.875">0.875</span></td>'
        '<td class="number"><span class="best" title="0.9375">0.9375</span>'
    ) in compare
    assert (
        '<code>loss/train</code></th><td class="number"><span class="muted">–</span></td>'
        '<td class="number"><span class="best" title="0.125">0.125</span>'
    ) in compare

    only_second = client.get("/models/digits/?compare=2").content.decode()
    compare = only_second[only_second.index('id="metrics-heading"') :]
    assert '<code>accuracy/test</code></th><td class="number"><span title="0.9375">0.9375</span></td></tr>' in compare


def test_alias_and_tag_buttons_change_the_version(registry, one_version, client):
    client.force_login(registry.alice)

    response = client.post("/models/digits/versions/1/alias/", {"alias": "champion"}, follow=True)
    assert "champion now points to version 1." in response.content.decode()
    assert ModelVersion.objects.get(version=1).aliases.get().name == "champion"
    client.post("/models/digits/versions/1/alias/", {"alias": "champion", "remove": "1"})
    assert not ModelVersion.objects.get(version=1).aliases.exists()

    client.post("/models/digits/versions/1/tags/", {"key": "stage", "value": "prod"})
    assert ModelVersion.objects.get(version=1).tags == {"stage": "prod"}
    client.post("/models/digits/versions/1/tags/", {"key": "stage", "remove": "1"})
    assert ModelVersion.objects.get(version=1).tags == {}

    bad = client.post("/models/digits/versions/1/alias/", {"alias": "Not OK"}, follow=True).content.decode()
    assert "&#x27;Not OK&#x27; is not a valid alias" in bad


def test_a_model_and_a_version_can_be_made_in_the_browser(registry, settings, client):
    job = succeeded_job(registry, settings)
    client.force_login(registry.alice)

    refused = client.post("/models/", {"name": "Bad Name", "department": "vision"})
    assert refused.status_code == 400 and "is not a valid model name" in refused.content.decode()
    assert client.post("/models/", {"name": "digits", "department": "vision"})["Location"] == "/models/digits/"
    page = client.post(
        "/models/digits/versions/", {"source_job": str(job.pk), "artifact_path": "nope.joblib", "framework": "onnx"}
    )
    html = page.content.decode()
    assert page.status_code == 400
    assert "&#x27;nope.joblib&#x27; does not exist in the output folder of job" in html
    # what was typed stays in the form, the field with the problem marked
    assert f'name="source_job" required inputmode="numeric" pattern="[0-9]+" placeholder="42" value="{job.pk}"' in html
    assert 'class="field has-error">\n      <label for="r-path">' in html and 'value="nope.joblib"' in html
    assert '<option value="onnx" selected>onnx</option>' in html
    page = client.post(
        "/models/digits/versions/", {"source_job": str(job.pk), "artifact_path": "model.joblib"}, follow=True
    )
    assert page.redirect_chain[-1][0] == "/models/digits/versions/1/"
    assert "Version 1 registered." in page.content.decode()
    assert ModelVersion.objects.get().lineage["job"] == job.pk


def test_the_model_pages_speak_chinese(registry, one_version, client):
    client.force_login(registry.alice)
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})

    assert "模型" in client.get("/models/").content.decode()
    html = client.get("/models/digits/").content.decode()
    assert "版本" in html and "指标对比" in html
