"""platform/kustomize/ as files (no cluster, no kubectl needed): every YAML document parses; every file a
kustomization names exists; the overlay patches only what the base has; every resource file passes
kubernetes-validate in strict mode; the in-cluster datastores' passwords agree with the URLs the portal
gets; the NetworkPolicies let only the portal's own pods reach its datastores.
"""

from __future__ import annotations

import re

import kubernetes_validate
import pytest
import yaml

from tests.platform_support import (
    BASE,
    KUSTOMIZATIONS,
    OVERLAY,
    PLATFORM,
    ROOT,
    container_of,
    env_sources,
    kustomization,
    load_documents,
    read_env_file,
    resource_files,
    validate,
)


def test_it_parses_every_yaml_document_under_platform():
    files = sorted(PLATFORM.rglob("*.yaml")) + sorted(PLATFORM.rglob("*.yml"))
    assert len(files) >= 10
    for path in files:
        docs = load_documents(path)
        assert docs, f"{path.relative_to(ROOT)} has no document"
        for doc in docs:
            assert isinstance(doc, dict), f"{path.relative_to(ROOT)}: a document is not a mapping"
            assert doc.get("apiVersion") and doc.get("kind"), f"{path.relative_to(ROOT)}: apiVersion and kind"


def test_it_finds_every_file_each_kustomization_names():
    assert {BASE, OVERLAY} <= {path.parent for path in KUSTOMIZATIONS}
    for path in KUSTOMIZATIONS:
        folder, spec = path.parent, yaml.safe_load(path.read_text())
        where = path.relative_to(ROOT)
        assert spec["kind"] == "Kustomization", where
        unknown = set(spec) - {
            "apiVersion",
            "kind",
            "namespace",
            "labels",
            "resources",
            "patches",
            "images",
            "replicas",
            "configMapGenerator",
            "secretGenerator",
        }
        assert not unknown, f"{where}: unexpected fields {unknown} (deprecated ones such as commonLabels?)"
        for entry in spec.get("resources", []):
            target = folder / entry
            assert target.is_file() or (target / "kustomization.yaml").is_file(), f"{where}: resource {entry} missing"
        for generator in spec.get("configMapGenerator", []) + spec.get("secretGenerator", []):
            for entry in generator.get("envs", []) + generator.get("files", []):
                assert (folder / entry).is_file(), f"{where}: {generator['name']} reads missing {entry}"
        for patch in spec.get("patches", []):
            if "path" in patch:
                assert (folder / patch["path"]).is_file(), f"{where}: patch {patch['path']} missing"
            else:
                assert isinstance(yaml.safe_load(patch["patch"]), dict), f"{where}: an inline patch does not parse"


def test_it_patches_only_resources_that_the_base_has():
    base = {(doc["kind"], doc["metadata"]["name"]) for path in resource_files(BASE) for doc in load_documents(path)}
    base |= {("Secret", g["name"]) for g in kustomization(BASE).get("secretGenerator", [])}
    base |= {("ConfigMap", g["name"]) for g in kustomization(BASE).get("configMapGenerator", [])}
    spec = kustomization(OVERLAY)
    for patch in spec["patches"]:
        doc = (
            yaml.safe_load(patch["patch"])
            if "patch" in patch
            else yaml.safe_load((OVERLAY / patch["path"]).read_text())
        )
        assert (doc["kind"], doc["metadata"]["name"]) in base, (
            f"the overlay patches {doc['kind']} {doc['metadata']['name']}"
        )
    for generator in spec.get("configMapGenerator", []) + spec.get("secretGenerator", []):
        kind = "ConfigMap" if generator in spec.get("configMapGenerator", []) else "Secret"
        assert (kind, generator["name"]) in base and generator["behavior"] in ("merge", "replace")
    for replica in spec.get("replicas", []):
        assert ("Deployment", replica["name"]) in base, replica


@pytest.mark.parametrize("folder", [BASE, OVERLAY], ids=["base", "overlay"])
def test_it_validates_every_resource_file_strictly(folder):
    docs = [doc for path in resource_files(folder) for doc in load_documents(path)]
    assert docs
    for doc in docs:
        validate(doc)


def test_it_rejects_a_typo_in_strict_mode():
    # Proof that validate() is strict: an unknown field fails instead of being pruned by the API server.
    service = next(doc for doc in load_documents(BASE / "web.yaml") if doc["kind"] == "Service")
    service["spec"]["portz"] = service["spec"].pop("ports")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(service)


def test_it_gives_the_in_cluster_postgres_the_password_in_database_url():
    url = read_env_file(BASE / "secret.example.env")["DATABASE_URL"]
    password = read_env_file(BASE / "postgres.example.env")["POSTGRES_PASSWORD"]
    assert re.match(rf"postgres://portal:{re.escape(password)}@gpu-portal-postgres:5432/portal$", url)


def test_the_in_cluster_redis_asks_for_the_password_that_redis_url_carries():
    redis = container_of(BASE / "redis.yaml", "StatefulSet", "redis")
    assert redis["args"][-2:] == ["--requirepass", "$(REDIS_PASSWORD)"]  # expanded by the kubelet from env
    env = env_sources(redis)
    assert env["REDIS_PASSWORD"] == env["REDISCLI_AUTH"] == {"name": "gpu-portal-redis", "key": "REDIS_PASSWORD"}
    password = read_env_file(BASE / "redis.example.env")["REDIS_PASSWORD"]
    assert read_env_file(BASE / "secret.example.env")["REDIS_URL"] == f"redis://:{password}@gpu-portal-redis:6379/0"


def test_the_in_cluster_postgres_never_trusts_a_connection():
    env = env_sources(container_of(BASE / "postgres.yaml", "StatefulSet", "postgres"))
    assert env["POSTGRES_PASSWORD"] == {"name": "gpu-portal-postgres", "key": "POSTGRES_PASSWORD"}
    assert env["POSTGRES_HOST_AUTH_METHOD"] == "scram-sha-256"
    assert set(env["POSTGRES_INITDB_ARGS"].split()) == {"--auth-local=scram-sha-256", "--auth-host=scram-sha-256"}


def selects(selector: dict, labels: dict) -> bool:
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def admitted(policies: list[dict], source: dict | None, target: dict, port: str) -> bool:
    """Whether NetworkPolicies admit traffic from a pod of this namespace with labels ``source`` (None: from
    outside the namespace) to a pod with labels ``target`` on its named ``port``."""
    chosen = [
        p for p in policies if selects(p["spec"]["podSelector"], target) and "Ingress" in p["spec"]["policyTypes"]
    ]
    assert chosen, "every pod is selected by the default deny"
    for policy in chosen:
        for rule in policy["spec"].get("ingress", []):
            ports_ok = "ports" not in rule or any(p["port"] == port for p in rule["ports"])
            peers = rule.get("from")
            peers_ok = peers is None or (
                source is not None
                and any(set(peer) == {"podSelector"} and selects(peer["podSelector"], source) for peer in peers)
            )
            if ports_ok and peers_ok:
                return True
    return False


def test_only_the_portals_own_pods_reach_its_datastores_and_anyone_reaches_web():
    policies = load_documents(BASE / "networkpolicy.yaml")
    for policy in policies:
        validate(policy)
    labels = {
        name: {"app.kubernetes.io/name": "gpu-portal", "app.kubernetes.io/component": name}
        for name in ("web", "worker", "beat", "watcher", "scheduler", "postgres", "redis")
    }
    for store, port in (("postgres", "postgres"), ("redis", "redis")):
        for process in ("web", "worker", "beat", "watcher", "scheduler"):
            assert admitted(policies, labels[process], labels[store], port), (process, store)
        assert not admitted(policies, None, labels[store], port)  # a job pod, another namespace
        assert not admitted(policies, {"app.kubernetes.io/name": "intruder"}, labels[store], port)
    assert admitted(policies, None, labels["web"], "http")
    assert not admitted(policies, None, labels["worker"], "http") and not admitted(
        policies, None, labels["web"], "redis"
    )
