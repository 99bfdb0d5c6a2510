"""Serving on Kubernetes: one KServe InferenceService per variant, driven through the real `kubernetes`
client (clusters.kube.Kube) against the HTTP API fake (tests/k8s/kfake.py).

The fake validates every InferenceService against KServe's official CRD (closed: unknown fields are
refused). Tests play KServe's controller by writing the status it would write: conditions, generation
observed, address.
"""

from __future__ import annotations

import pytest

from accounts.models import Department
from clusters.k8s import ManifestError
from clusters.manifest_validation import manifest_problems
from clusters.models import Cluster, GpuPool
from models_registry.models import ModelVersion, RegisteredModel
from quotas.models import Quota
from serving import servers
from serving.backends.kubernetes import KServeSpec, KubernetesServingBackend
from serving.backends.local import ServingError
from serving.backends.manifests import (
    API_VERSION,
    KIND,
    InferenceTarget,
    ServingSettings,
    inference_service,
    is_ready,
    service_name,
)
from serving.models import Deployment, ModelServer, Variant
from serving.routing_table import _table_of
from serving.selectors import routing_table

NAMESPACE = "portal-vision"
SETTINGS = ServingSettings(artifact_uri_prefix="pvc://portal-models/")
TARGET = InferenceTarget(
    server_id=7,
    deployment="churn",
    variant="blue",
    department="vision",
    namespace=NAMESPACE,
    artifact_uri="store://churn-model/3/model.joblib",
    replicas=2,
)


def spec(target: InferenceTarget = TARGET) -> KServeSpec:
    return KServeSpec(server_id=target.server_id, model_name="unused", artifact=None, store_root=None, target=target)


def kserve_reconciles(
    kube,
    name: str,
    *,
    ready: bool = True,
    url: str = "",
    namespace: str = NAMESPACE,
    observed: int | None = None,
    failure: str = "",
) -> dict:
    """What KServe's controller writes into an InferenceService's status."""
    obj = kube.get(API_VERSION, KIND, namespace, name)
    status = {
        "observedGeneration": obj["metadata"]["generation"] if observed is None else observed,
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "message": "" if ready else "Revision is not ready",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    if url:
        status["address"] = {"url": url}
        status["url"] = f"http://{name}.{namespace}.example.com"
    if failure:
        status["modelStatus"] = {
            "transitionStatus": "BlockedByFailedLoad",
            "lastFailureInfo": {"reason": "ModelLoadFailed", "message": failure},
        }
    obj["status"] = status
    return kube.update(obj, status=True)


@pytest.fixture
def namespace(kube):
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return NAMESPACE


@pytest.fixture
def backend(kube_api, namespace):
    return KubernetesServingBackend(kube_api, SETTINGS)


# --- the builder -----------------------------------------------------------------------------------


def test_it_builds_one_valid_inference_service_per_variant():
    manifest = inference_service(TARGET, SETTINGS)
    assert manifest_problems(manifest) == []
    assert manifest["metadata"]["name"] == "churn-blue-7" and manifest["metadata"]["namespace"] == NAMESPACE
    assert manifest["metadata"]["labels"] == {
        "portal/deployment": "churn",
        "portal/variant": "blue",
        "portal/server-id": "7",
        "portal/department": "vision",
        "app.kubernetes.io/managed-by": "gpu-portal",
    }
    predictor = manifest["spec"]["predictor"]
    assert predictor["model"]["modelFormat"] == {"name": "sklearn"}
    assert predictor["model"]["storageUri"] == "pvc://portal-models/churn-model/3/model.joblib"
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (2, 2)
    assert "canaryTrafficPercent" not in predictor  # the portal's router splits traffic between variants


def test_it_names_services_as_dns_labels_short_enough_for_kserve_hosts():
    name = service_name("Very_Long_Deployment_Name_With_Capitals_and_more_words", "shadow", 123456)
    assert name.endswith("-123456") and len(name) <= 40 and name == name.lower() and name[0].isalpha()
    assert (
        manifest_problems(
            inference_service(InferenceTarget(**{**TARGET.__dict__, "deployment": "9lives", "server_id": 3}), SETTINGS)
        )
        == []
    )


def test_it_maps_the_artifact_store_onto_the_cluster_with_the_setting():
    s3 = ServingSettings(
        artifact_uri_prefix="s3://models/portal",
        serving_runtime="kserve-sklearnserver",
        serving_service_account="s3-reader",
        serving_max_replicas=5,
    )
    manifest = inference_service(TARGET, s3)
    assert manifest_problems(manifest) == []
    predictor = manifest["spec"]["predictor"]
    assert predictor["model"]["storageUri"] == "s3://models/portal/churn-model/3/model.joblib"
    assert predictor["model"]["runtime"] == "kserve-sklearnserver" and predictor["serviceAccountName"] == "s3-reader"
    assert predictor["maxReplicas"] == 5
    with pytest.raises(ManifestError, match="artifact_uri_prefix"):
        inference_service(TARGET, ServingSettings())
    with pytest.raises(ManifestError, match="not a valid store URI"):
        inference_service(InferenceTarget(**{**TARGET.__dict__, "artifact_uri": "store://../etc/passwd"}), SETTINGS)


def test_it_refuses_bad_settings_with_a_message():
    with pytest.raises(ManifestError, match="serving_max_replicas must be an integer"):
        ServingSettings.from_settings("gpu1", {"serving_max_replicas": "3"})


def test_readiness_needs_the_current_generation_observed():
    obj = {
        "metadata": {"generation": 2},
        "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert not is_ready(obj)
    obj["status"]["observedGeneration"] = 2
    assert is_ready(obj)


# --- the backend through the real client ------------------------------------------------------------


def test_start_creates_one_validated_inference_service_and_twice_is_one(backend, kube):
    process = backend.start(spec())
    again = backend.start(spec())
    assert process.handle == again.handle == f"{NAMESPACE}/churn-blue-7" and process.model_name == "churn-blue-7"
    found = kube.list(API_VERSION, KIND, NAMESPACE)
    assert [obj["metadata"]["name"] for obj in found] == ["churn-blue-7"]
    assert found[0]["metadata"]["generation"] == 1  # the second start changed nothing
    assert found[0]["spec"]["predictor"]["model"]["storageUri"] == "pvc://portal-models/churn-model/3/model.joblib"
    assert sum(1 for method, path in kube.requests if method == "POST" and "inferenceservices" in path) == 2


def test_start_patches_a_changed_spec_and_it_is_not_ready_until_kserve_saw_it(backend, kube):
    process = backend.start(spec())
    kserve_reconciles(kube, "churn-blue-7", url="http://churn-blue-7.portal-vision.svc.cluster.local")
    assert backend.ready(process)
    backend.start(spec(InferenceTarget(**{**TARGET.__dict__, "replicas": 3})))
    obj = kube.get(API_VERSION, KIND, NAMESPACE, "churn-blue-7")
    assert obj["spec"]["predictor"]["minReplicas"] == 3 and obj["metadata"]["generation"] == 2
    assert not backend.ready(process)  # Ready=True still, but for generation 1
    kserve_reconciles(kube, "churn-blue-7", url="http://churn-blue-7.portal-vision.svc.cluster.local")
    assert backend.ready(process)


def test_ready_only_when_kserve_says_ready_for_this_generation(backend, kube):
    process = backend.start(spec())
    assert not backend.ready(process)  # no status yet
    kserve_reconciles(kube, "churn-blue-7", ready=False)
    assert not backend.ready(process) and backend.alive(process)
    kserve_reconciles(kube, "churn-blue-7", ready=True, observed=0, url="http://x.portal-vision.svc.cluster.local")
    assert not backend.ready(process)
    kserve_reconciles(
        kube, "churn-blue-7", ready=True, url="http://churn-blue-7-predictor.portal-vision.svc.cluster.local"
    )
    assert backend.ready(process)
    assert backend.url(process) == "http://churn-blue-7-predictor.portal-vision.svc.cluster.local"


def test_a_model_that_failed_to_load_is_not_alive_and_says_why(backend, kube):
    process = backend.start(spec())
    kserve_reconciles(kube, "churn-blue-7", ready=False, failure="model.joblib: unpickling error")
    assert not backend.alive(process)
    assert "unpickling error" in backend.output(7)


def test_stop_deletes_it_and_running_finds_only_what_is_left(backend, kube):
    blue = backend.start(spec())
    green = backend.start(spec(InferenceTarget(**{**TARGET.__dict__, "server_id": 8, "variant": "green"})))
    kube.seed(
        {
            "apiVersion": API_VERSION,
            "kind": KIND,  # not the portal's: never reported nor stopped
            "metadata": {"name": "someone-else", "namespace": NAMESPACE},
            "spec": {"predictor": {}},
        }
    )
    assert sorted(backend.running()) == [7, 8]
    backend.stop(blue)
    assert kube.get(API_VERSION, KIND, NAMESPACE, "churn-blue-7") is None
    assert not backend.alive(blue) and backend.alive(green)
    assert sorted(backend.running()) == [8] and backend.running()[8].handle == green.handle


def test_an_unreachable_cluster_is_a_transient_serving_error(backend, kube):
    process = backend.start(spec())
    kube.inject(status=503, times=10, method="GET", path_contains="inferenceservices")
    with pytest.raises(ServingError) as caught:
        backend.alive(process)
    assert not caught.value.permanent


# --- through the portal: servers_reconcile, the router's table ---------------------------------------


@pytest.fixture
def k8s_portal(world, settings, tmp_path, kube, namespace):
    settings.PORTAL_DATA_ROOT = tmp_path / "portal"
    settings.PORTAL_ARTIFACT_ROOT = tmp_path / "portal" / "artifacts"
    cluster = Cluster.objects.create(
        name="gpu1",
        backend=Cluster.Backend.KUBERNETES,
        settings={"kube_url": kube.url, "artifact_uri_prefix": "pvc://portal-models/"},
    )
    pool = GpuPool.objects.create(cluster=cluster, gpu_type="A100", nodes=1, gpus_per_node=8)
    Quota.objects.create(department=Department.objects.get(slug="vision"), pool=pool, nominal=4)
    model = RegisteredModel.objects.create(name="churn-model", department=Department.objects.get(slug="vision"))
    for number in (1, 2):
        ModelVersion.objects.create(
            model=model, version=number, artifact_uri=f"store://churn-model/{number}/model.joblib"
        )
    yield world
    servers.servers_stop()


def test_a_deployment_on_a_kubernetes_cluster_goes_ready_through_reconcile(k8s_portal, kube):
    body = {
        "name": "churn",
        "department": "vision",
        "model": "churn-model",
        "strategy": "ab",
        "cluster": "gpu1",
        "variants": [{"name": "a", "version": 1, "weight": 70}, {"name": "b", "version": 2, "weight": 30}],
    }
    response = k8s_portal.api(k8s_portal.alice).post("/api/v1/deployments/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["cluster"] == "gpu1"

    assert servers.servers_reconcile()["started"] == 2
    services = {obj["metadata"]["labels"]["portal/variant"]: obj for obj in kube.list(API_VERSION, KIND, NAMESPACE)}
    assert sorted(services) == ["a", "b"]
    assert services["b"]["spec"]["predictor"]["model"]["storageUri"] == "pvc://portal-models/churn-model/2/model.joblib"
    assert set(ModelServer.objects.values_list("status", flat=True)) == {ModelServer.Status.STARTING}

    servers.servers_reconcile()  # KServe has not said anything yet: still starting, nothing created twice
    assert set(ModelServer.objects.values_list("status", flat=True)) == {ModelServer.Status.STARTING}
    assert len(kube.list(API_VERSION, KIND, NAMESPACE)) == 2

    for obj in services.values():
        name = obj["metadata"]["name"]
        kserve_reconciles(kube, name, url=f"http://{name}.{NAMESPACE}.svc.cluster.local")
    assert servers.servers_reconcile()["ready"] == 2
    variant = Variant.objects.get(deployment__name="churn", name="b")
    name = services["b"]["metadata"]["name"]
    assert variant.server.url == f"http://{name}.{NAMESPACE}.svc.cluster.local"

    # The router calls the cluster's address, on the scheme's port, under KServe's model name.
    table = _table_of(routing_table("churn"))
    route = table.routes["b"]
    assert (route.host, route.port, route.path) == (
        f"{name}.{NAMESPACE}.svc.cluster.local",
        80,
        f"/v1/models/{name}:predict",
    )
    assert dict(table.choices) == {"a": 70, "b": 30}


def test_a_crashed_inference_service_is_replaced_and_orphans_are_deleted(k8s_portal, kube):
    body = {
        "name": "churn",
        "department": "vision",
        "model": "churn-model",
        "strategy": "ab",
        "cluster": "gpu1",
        "variants": [{"name": "a", "version": 1, "weight": 100}],
    }
    assert k8s_portal.api(k8s_portal.alice).post("/api/v1/deployments/", body, format="json").status_code == 201
    servers.servers_reconcile()
    [obj] = kube.list(API_VERSION, KIND, NAMESPACE)
    name = obj["metadata"]["name"]
    kserve_reconciles(kube, name, url=f"http://{name}.{NAMESPACE}.svc.cluster.local")
    servers.servers_reconcile()
    assert ModelServer.objects.get().status == ModelServer.Status.READY

    kserve_reconciles(kube, name, ready=False, failure="out of memory while loading")
    servers.servers_reconcile()
    server = ModelServer.objects.get()
    # Deleted and made anew (the fake deletes at once): a new object KServe has not reconciled yet.
    assert server.status == ModelServer.Status.STARTING and server.restarts == 1
    fresh = kube.get(API_VERSION, KIND, NAMESPACE, name)
    assert fresh["metadata"]["uid"] != obj["metadata"]["uid"] and "status" not in fresh

    Deployment.objects.filter(name="churn").delete()  # its variants go with it; the InferenceService stays
    assert len(kube.list(API_VERSION, KIND, NAMESPACE)) == 1
    assert servers.servers_reconcile()["stopped"] == 1
    assert kube.list(API_VERSION, KIND, NAMESPACE) == []


def test_a_deployment_defaults_to_the_departments_first_cluster(k8s_portal):
    body = {
        "name": "local-one",
        "department": "vision",
        "model": "churn-model",
        "strategy": "ab",
        "variants": [{"name": "a", "version": 1, "weight": 100}],
    }
    response = k8s_portal.api(k8s_portal.alice).post("/api/v1/deployments/", body, format="json")
    assert response.status_code == 201 and response.json()["cluster"] == "local"  # the demo's cluster is older
    refused = k8s_portal.api(k8s_portal.alice).post(
        "/api/v1/deployments/", {**body, "name": "x", "cluster": "nowhere"}, format="json"
    )
    assert refused.status_code == 400 and "nowhere" in str(refused.json())
