"""Model servers and deployments: real `serving.backends.server` processes, started and watched by
servers_reconcile as the periodic task does, and the deployments API.

Versions are small scikit-learn models written into the test's own artifact store. Every server a test
starts is stopped at teardown, and its process is checked to be gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from accounts.models import AuditEvent, Department
from clusters import local_procs
from models_registry.models import ModelVersion, RegisteredModel
from serving import servers
from serving.backends.local import LocalServingBackend, ServerSpec
from serving.models import Deployment, ModelServer, Variant

ROOT = Path(__file__).resolve().parents[2]
INSTANCES = [[0.9, 0.1], [0.1, 0.9]]


def poll(attempt, *, what: str, timeout: float = 30, reconcile: bool = False):
    """Until ``attempt()`` is truthy; with ``reconcile``, look after the servers meanwhile like the beat task."""
    deadline = time.monotonic() + timeout
    while True:
        if reconcile:
            servers.servers_reconcile()
        value = attempt()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def register(
    name: str, version: int, *, department: str = "vision", flip: bool = False, tags: dict | None = None
) -> ModelVersion:
    """A version of a two-feature classifier (class 1 when the first feature is larger; ``flip``: the opposite)."""
    from django.conf import settings

    rng = np.random.RandomState(version)
    x = rng.rand(200, 2)
    y = (x[:, 0] > x[:, 1]).astype(int)
    folder = Path(settings.PORTAL_ARTIFACT_ROOT) / name / str(version)
    folder.mkdir(parents=True, exist_ok=True)
    joblib.dump(LogisticRegression().fit(x, 1 - y if flip else y), folder / "model.joblib")
    model, _ = RegisteredModel.objects.get_or_create(
        name=name, defaults={"department": Department.objects.get(slug=department)}
    )
    return ModelVersion.objects.create(
        model=model, version=version, artifact_uri=f"store://{name}/{version}/model.joblib", tags=tags or {}
    )


def all_ready(name: str) -> bool:
    servers = ModelServer.objects.filter(variant__deployment__name=name)
    return (
        servers.exists()
        and all(s.status == ModelServer.Status.READY for s in servers)
        and servers.count() == Variant.objects.filter(deployment__name=name).count()
    )


def create(portal, body: dict, *, user=None, ready: bool = True) -> dict:
    response = portal.api(user or portal.alice).post("/api/v1/deployments/", body, format="json")
    assert response.status_code == 201, response.json()
    if ready:
        poll(lambda: all_ready(body["name"]), what=f"the servers of {body['name']}", reconcile=True)
    return response.json()


def ab(name: str, model: str = "iris", *, weights=(50, 50), sticky: bool = True) -> dict:
    return {
        "name": name,
        "department": "vision",
        "model": model,
        "strategy": "ab",
        "sticky": sticky,
        "variants": [
            {"name": "a", "version": 1, "weight": weights[0]},
            {"name": "b", "version": 2, "weight": weights[1]},
        ],
    }


def predict_direct(url: str, model: str, instances=INSTANCES) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{url}/v1/models/{model}:predict",
        data=json.dumps({"instances": instances}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def portal(world, settings, tmp_path):
    """The test world with its own data root and artifact store; every model server is stopped afterwards."""
    settings.PORTAL_DATA_ROOT = tmp_path / "portal"
    settings.PORTAL_ARTIFACT_ROOT = tmp_path / "portal" / "artifacts"
    settings.PORTAL_SERVING_FAULT_INJECTION = True
    yield world
    pids = [(s.pid, s.handle) for s in ModelServer.objects.exclude(pid=None)]
    servers.servers_stop()
    for pid, handle in pids:
        poll(
            lambda pid=pid, handle=handle: not local_procs.alive(pid, int(handle) if handle else None),
            what=f"model server {pid} to end",
            timeout=15,
        )


# --- The model server on its own ----------------------------------------------------------------------


def test_it_speaks_kserve_v1_and_loads_only_from_the_store(portal, settings, tmp_path):
    register("iris", 1)
    backend = LocalServingBackend(tmp_path / "servers")
    store = Path(settings.PORTAL_ARTIFACT_ROOT)
    process = backend.start(
        ServerSpec(server_id=1, model_name="iris", artifact=store / "iris/1/model.joblib", store_root=store)
    )
    try:
        poll(lambda: backend.ready(process), what="the server to be ready")
        with urllib.request.urlopen(f"{process.url}/v1/models/iris", timeout=5) as response:
            assert json.loads(response.read()) == {"name": "iris", "ready": True}
        assert predict_direct(process.url, "iris") == (200, {"predictions": [1, 0]})
        status, body = predict_direct(process.url, "iris", instances=[])
        assert status == 400 and "instances" in body["error"]
        status, body = predict_direct(process.url, "other")
        assert status == 404
    finally:
        backend.stop(process)
    assert not backend.alive(process)

    outside = tmp_path / "elsewhere" / "model.joblib"
    outside.parent.mkdir()
    outside.write_bytes((store / "iris/1/model.joblib").read_bytes())
    for artifact in (outside, store / ".." / "elsewhere" / "model.joblib"):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "serving.backends.server",
                "--model-name",
                "iris",
                "--artifact",
                str(artifact),
                "--port",
                "1",
                "--store",
                str(store),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2
        assert "outside the portal's artifact store" in result.stderr


# --- Deployments and their servers --------------------------------------------------------------------


def test_a_deployment_gets_one_ready_server_per_variant(portal):
    register("iris", 1), register("iris", 2, flip=True)
    created = create(portal, ab("iris-ab"))
    assert [(v["name"], v["version"], v["weight"]) for v in created["variants"]] == [("a", 1, 50), ("b", 2, 50)]
    servers = {s.variant.name: s for s in ModelServer.objects.select_related("variant")}
    assert predict_direct(servers["a"].url, "iris")[1] == {"predictions": [1, 0]}
    assert predict_direct(servers["b"].url, "iris")[1] == {"predictions": [0, 1]}
    detail = portal.api(portal.carol).get("/api/v1/deployments/iris-ab/").json()
    assert [v["server"]["status"] for v in detail["variants"]] == ["ready", "ready"]
    assert AuditEvent.objects.filter(action="deployment.create", target="deployment iris-ab").exists()


def test_a_crashed_server_is_restarted(portal):
    register("iris", 1)
    create(
        portal,
        {
            "name": "solo",
            "department": "vision",
            "model": "iris",
            "variants": [{"name": "a", "version": 1, "weight": 100}],
        },
    )
    server = ModelServer.objects.get()
    os.kill(server.pid, signal.SIGKILL)
    poll(lambda: not local_procs.alive(server.pid, int(server.handle)), what="the server to die")
    restarted = poll(
        lambda: ModelServer.objects.filter(status="ready", restarts=1).exclude(pid=server.pid).first(),
        what="the server to be restarted",
        reconcile=True,
    )
    assert predict_direct(restarted.url, "iris") == (200, {"predictions": [1, 0]})
    assert servers.backoff_seconds(0) == 0 and servers.backoff_seconds(3) == 4
    assert servers.backoff_seconds(50) == servers.MAX_BACKOFF_SECONDS


def test_removing_a_variant_stops_its_server(portal):
    register("iris", 1), register("iris", 2)
    create(portal, ab("iris-ab"))
    b = ModelServer.objects.get(variant__name="b")
    response = portal.api(portal.alice).patch(
        "/api/v1/deployments/iris-ab/", {"variants": [{"name": "a", "version": 1, "weight": 100}]}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["revision"] == 2
    assert [v["name"] for v in response.json()["variants"]] == ["a"]
    poll(lambda: not local_procs.alive(b.pid, int(b.handle)), what="b's server to be stopped", reconcile=True)


def test_changes_are_validated_and_every_problem_named(portal):
    register("iris", 1), register("iris", 2)
    client = portal.api(portal.alice)
    response = client.post(
        "/api/v1/deployments/",
        {
            **ab("bad"),
            "variants": [{"name": "a", "version": 1, "weight": 70}, {"name": "a", "version": 2, "weight": 70}],
        },
        format="json",
    )
    assert response.status_code == 400
    assert "used twice" in " ".join(response.json()["name"]) and "sum to 100" in " ".join(response.json()["weight"])
    response = client.post(
        "/api/v1/deployments/", {**ab("bad"), "variants": [{"name": "a", "version": 9, "weight": 100}]}, format="json"
    )
    assert response.status_code == 400 and "no version 9" in response.json()["variants"][0]
    response = client.post("/api/v1/deployments/", {**ab("bad"), "department": "nlp"}, format="json")
    assert response.status_code == 400 and "department" in response.json()
    assert not Deployment.objects.exists()


def test_promote_and_rollback_move_all_weights_at_once_with_a_revision_each(portal):
    register("iris", 1), register("iris", 2)
    create(portal, ab("iris-ab", weights=(80, 20)), ready=False)
    client = portal.api(portal.alice)
    promoted = client.post("/api/v1/deployments/iris-ab/promote/", {"variant": "b"}, format="json").json()
    assert (promoted["revision"], [(v["name"], v["weight"]) for v in promoted["variants"]]) == (
        2,
        [("a", 0), ("b", 100)],
    )
    assert client.post("/api/v1/deployments/iris-ab/promote/", {"variant": "zz"}, format="json").status_code == 400
    back = client.post("/api/v1/deployments/iris-ab/rollback/").json()
    assert (back["revision"], back["status"]) == (3, "rolled_back")
    assert [(v["name"], v["weight"]) for v in back["variants"]] == [("a", 80), ("b", 20)]
    assert client.post("/api/v1/deployments/iris-ab/rollback/").status_code == 409  # nothing earlier left
    actions = list(AuditEvent.objects.filter(target="deployment iris-ab").values_list("action", flat=True))
    assert actions == ["deployment.rollback", "deployment.promote", "deployment.create"]


def test_outsiders_cannot_read_or_change_a_deployment_and_anonymous_gets_401(portal):
    register("iris", 1)
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
    bob, anonymous = portal.api(portal.bob), portal.api()
    for method, url, body in [
        ("get", "/api/v1/deployments/solo/", None),
        ("patch", "/api/v1/deployments/solo/", {"sticky": False}),
        ("post", "/api/v1/deployments/solo/promote/", {"variant": "a"}),
        ("post", "/api/v1/deployments/solo/rollback/", None),
        ("get", "/api/v1/deployments/solo/metrics/", None),
    ]:
        assert getattr(bob, method)(url, body, format="json").status_code == 404, url
        assert getattr(anonymous, method)(url, body, format="json").status_code == 401, url
    assert bob.get("/api/v1/deployments/").json()["count"] == 0
    assert portal.api(portal.alice).get("/api/v1/deployments/").json()["count"] == 1
    assert Deployment.objects.get().revision == 1


def test_the_deployment_pages_show_variants_and_offer_promote_and_rollback(portal, client):
    register("iris", 1), register("iris", 2)
    create(portal, ab("iris-ab"), ready=False)
    client.force_login(portal.alice)
    page = client.get("/deployments/")
    assert page.status_code == 200 and b"iris-ab" in page.content
    page = client.get("/deployments/iris-ab/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "uPlot.iife.min.js" in html and "/deployments/iris-ab/promote/" in html
    response = client.post("/deployments/iris-ab/promote/", {"variant": "a"})
    assert response.status_code == 302
    assert [(v.name, v.weight) for v in Variant.objects.order_by("name")] == [("a", 100), ("b", 0)]
    client.post("/deployments/iris-ab/rollback/")
    assert [(v.name, v.weight) for v in Variant.objects.order_by("name")] == [("a", 50), ("b", 50)]
    client.force_login(portal.bob)
    assert client.get("/deployments/iris-ab/").status_code == 404
    assert client.post("/deployments/iris-ab/promote/", {"variant": "a"}).status_code == 404


def test_the_router_wants_a_token_or_a_session_with_its_csrf_token(portal):
    from django.test import Client

    register("iris", 1)
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
    body = json.dumps({"instances": INSTANCES})
    anonymous = Client().post("/serve/solo/predict", body, content_type="application/json")
    assert (anonymous.status_code, anonymous.headers["WWW-Authenticate"]) == (401, "Token")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(portal.alice)
    refused = browser.post("/serve/solo/predict", body, content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
