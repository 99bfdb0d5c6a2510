"""The model registry: versions registered from URIs, model names, aliases and tags (helpers: test_registry.py)."""

from __future__ import annotations

from accounts.models import AuditEvent
from models_registry import from_job
from models_registry.artifacts import artifact_path
from models_registry.models import ModelVersion
from tests.models_registry.test_registry import (
    create_model,
    register,
    registered,
    registry,  # noqa: F401 - fixture
    succeeded_job,
)

# --- Registering from a URI --------------------------------------------------------------------


def test_it_registers_store_uris_of_visible_models_and_allowed_files_only(registry, settings, tmp_path):
    job = succeeded_job(registry, settings)
    create_model(registry)
    registered(registry, {"source_job": job.pk, "artifact_path": "model.joblib"})
    create_model(registry, user=registry.bob, name="nlp-secret", department="nlp")
    bobs = succeeded_job(registry, settings, user=registry.bob, department="nlp")
    registered(
        registry, {"source_job": bobs.pk, "artifact_path": "model.joblib"}, user=registry.bob, model="nlp-secret"
    )

    body = registered(registry, {"artifact_uri": "store://digits/1/model.joblib", "framework": "sklearn"})
    assert (body["version"], body["artifact_uri"]) == (2, "store://digits/2/model.joblib")
    assert body["lineage"]["source_uri"] == "store://digits/1/model.joblib" and body["lineage"]["job"] is None
    assert artifact_path(ModelVersion.objects.get(model__name="digits", version=2)).read_bytes() == b"a model"

    refused = {
        "store://nlp-secret/1/model.joblib": "Nothing at store://nlp-secret/1/model.joblib among the artifacts of your departments' models.",
        "store://digits/../nlp-secret/1/model.joblib": "'store://digits/../nlp-secret/1/model.joblib' is not a valid store URI",
        "s3://bucket/model.joblib": "'s3://bucket/model.joblib' cannot be registered: use a store://",
        "file:///etc/passwd": "Registering from file:// is off: ask a platform admin to set PORTAL_ARTIFACT_IMPORT_DIRS",
    }
    for uri, message in refused.items():
        response = register(registry, {"artifact_uri": uri})
        assert response.status_code == 400, uri
        assert response.json()["artifact_uri"][0].startswith(message), response.json()

    allowed = tmp_path / "imports"
    allowed.mkdir()
    (allowed / "model.joblib").write_bytes(b"imported")
    settings.PORTAL_ARTIFACT_IMPORT_DIRS = [allowed]
    body = registered(registry, {"artifact_uri": f"file://{allowed}/model.joblib"})
    assert body["artifact_uri"] == "store://digits/3/model.joblib"
    (allowed / "model.joblib").unlink()
    assert artifact_path(ModelVersion.objects.get(model__name="digits", version=3)).read_bytes() == b"imported"

    response = register(registry, {"artifact_uri": f"file://{tmp_path}/secret.joblib"})
    assert response.json()["artifact_uri"][0].startswith(f"'file://{tmp_path}/secret.joblib' is outside the folders")
    response = register(registry, {"artifact_uri": f"file://{allowed}/gone.joblib"})
    assert response.json()["artifact_uri"][0].startswith("'gone.joblib' does not exist in")


# --- Models ------------------------------------------------------------------------------------


def test_model_names_are_unique_slugs_in_a_department_of_the_caller(registry):
    create_model(registry)
    api = registry.api(registry.alice)

    assert api.post("/api/v1/models/", {"name": "digits", "department": "vision"}, format="json").json() == {
        "name": ["A model named 'digits' already exists; model names are unique across the portal, pick another."]
    }
    response = api.post("/api/v1/models/", {"name": "Digits Model", "department": "nlp"}, format="json")
    assert response.status_code == 400
    assert set(response.json()) == {"name", "department"}
    assert response.json()["department"] == ["You are not a member of a department called 'nlp'."]
    body = (
        registry.api(registry.admin)
        .post("/api/v1/models/", {"name": "bert", "department": "nlp", "description": "text"}, format="json")
        .json()
    )
    assert body == {
        **body,
        "name": "bert",
        "department": "nlp",
        "description": "text",
        "version_count": 0,
        "latest_version": None,
        "aliases": {},
        "created_by": "admin",
    }


# --- Aliases and tags --------------------------------------------------------------------------


def test_an_alias_points_to_one_version_and_setting_it_moves_it(registry, settings):
    job = succeeded_job(registry, settings)
    create_model(registry)
    for _ in range(2):
        registered(registry, {"source_job": job.pk, "artifact_path": "model.joblib"})
    api = registry.api(registry.alice)

    first = api.patch("/api/v1/models/digits/versions/1/", {"aliases": ["champion", "challenger"]}, format="json")
    assert first.status_code == 200 and first.json()["aliases"] == ["challenger", "champion"]
    second = api.patch("/api/v1/models/digits/versions/2/", {"aliases": ["champion"]}, format="json")
    assert second.json()["aliases"] == ["champion"]

    assert api.get("/api/v1/models/digits/versions/1/").json()["aliases"] == ["challenger"]
    assert api.get("/api/v1/models/digits/").json()["aliases"] == {"challenger": 1, "champion": 2}
    moves = AuditEvent.objects.filter(action="model.alias.set", target="digits@champion").order_by("pk")
    assert [(e.actor.username, e.data) for e in moves] == [
        ("alice", {"from_version": None, "to_version": 1}),
        ("alice", {"from_version": 1, "to_version": 2}),
    ]

    cleared = api.patch("/api/v1/models/digits/versions/1/", {"aliases": []}, format="json")
    assert cleared.json()["aliases"] == []
    assert api.get("/api/v1/models/digits/").json()["aliases"] == {"champion": 2}
    assert AuditEvent.objects.filter(action="model.alias.remove", target="digits@challenger").exists()

    bad = api.patch("/api/v1/models/digits/versions/1/", {"aliases": ["Champion!", "2"]}, format="json")
    assert bad.status_code == 400
    assert bad.json()["aliases"][0].startswith("'Champion!' is not a valid alias: use 1-40 lowercase letters")


def test_tags_are_merged_and_null_removes_one(registry, settings):
    job = succeeded_job(registry, settings)
    create_model(registry)
    registered(
        registry, {"source_job": job.pk, "artifact_path": "model.joblib", "tags": {"dataset": "digits", "owner": "a"}}
    )
    api = registry.api(registry.alice)

    body = api.patch(
        "/api/v1/models/digits/versions/1/", {"tags": {"stage": "prod", "owner": None}}, format="json"
    ).json()

    assert body["tags"] == {"dataset": "digits", "stage": "prod"}
    response = api.patch("/api/v1/models/digits/versions/1/", {"tags": {"x": "y"}, "alias": ["a"]}, format="json")
    assert response.status_code == 400 and response.json() == {"alias": ["Unknown field; did you mean 'aliases'?"]}


def test_a_job_whose_cluster_keeps_no_folders_here_is_refused_with_what_to_do(registry, settings, monkeypatch):
    """A Kubernetes job's output lives on the cluster's volumes: a 400 that says so, not a server error."""
    job = succeeded_job(registry, settings)
    create_model(registry)
    monkeypatch.setattr(from_job, "executor_for", lambda cluster: object())  # an executor with no root folder

    response = register(registry, {"source_job": job.pk, "artifact_path": "model.joblib"})

    assert response.status_code == 400
    assert "register it by artifact_uri" in response.json()["source_job"][0]
    assert not ModelVersion.objects.exists()
