"""platform/kustomize/ as rendered by `kubectl kustomize` (skipped when neither kubectl nor kustomize is
installed): the base and the example overlay validate strictly and refer only to objects they create; one
Deployment per Procfile process; the settings they give are the ones config/settings.py reads, and it
accepts their values; probes, unprivileged pods with resources; RBAC is exactly the table in
tests/platform_support.py; the priority classes are the ones the portal writes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.platform_support import (
    BASE,
    OVERLAY,
    PORTAL_IMAGE,
    PORTAL_UID,
    RBAC,
    ROOT,
    dockerfile_user,
    load_documents,
    names_the_code_reads,
    procfile,
    validate,
)

# --------------------------------------------------------------------------------------- rendered


def render(folder: Path) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl:
        command = [kubectl, "kustomize", str(folder)]
    elif shutil.which("kustomize"):
        command = [shutil.which("kustomize"), "build", str(folder)]
    else:
        pytest.skip("neither kubectl nor kustomize is installed: the rendered manifests are not checked")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {"base": render(BASE), "overlay": render(OVERLAY)}


def find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [doc for doc in docs if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)]


def pod_specs(docs: list[dict]) -> dict[str, dict]:
    return {
        doc["metadata"]["name"]: doc["spec"]["template"]["spec"]
        for doc in docs
        if doc["kind"] in ("Deployment", "StatefulSet")
    }


def portal_containers(docs: list[dict]):
    for doc in find(docs, "Deployment"):
        spec = doc["spec"]["template"]["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            if container["image"].rsplit("/", 1)[-1].split(":")[0] == PORTAL_IMAGE:
                yield doc, container


@pytest.mark.parametrize("variant", ["base", "overlay"])
def test_it_renders_manifests_that_validate_strictly(rendered, variant):
    docs = rendered[variant]
    for doc in docs:
        validate(doc)
    for doc in docs:
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"):
            assert doc["metadata"]["namespace"] == "gpu-portal", doc["metadata"]["name"]
    for binding in find(docs, "ClusterRoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-portal", "namespace": "gpu-portal"}]


@pytest.mark.parametrize("variant", ["base", "overlay"])
def test_it_refers_only_to_objects_it_creates(rendered, variant):
    docs = rendered[variant]
    names = {(doc["kind"], doc["metadata"]["name"]) for doc in docs}
    for name, spec in pod_specs(docs).items():
        if "serviceAccountName" in spec:
            assert ("ServiceAccount", spec["serviceAccountName"]) in names
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                assert ("Secret", volume["secret"]["secretName"]) in names, name
            if "persistentVolumeClaim" in volume:
                assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in names, name
        for container in spec.get("initContainers", []) + spec["containers"]:
            for source in container.get("envFrom", []):
                assert ("ConfigMap", source["configMapRef"]["name"]) in names, name
            for variable in container.get("env", []):
                if "valueFrom" in variable:
                    assert ("Secret", variable["valueFrom"]["secretKeyRef"]["name"]) in names, name
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet"):
            labels = doc["spec"]["template"]["metadata"]["labels"]
            assert doc["spec"]["selector"]["matchLabels"].items() <= labels.items()
        if doc["kind"] == "Service":
            selected = [
                d
                for d in docs
                if d["kind"] in ("Deployment", "StatefulSet")
                and doc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
            ]
            assert len(selected) == 1, doc["metadata"]["name"]
            ports = {
                p["name"] for c in selected[0]["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])
            }
            assert {port["targetPort"] for port in doc["spec"]["ports"]} <= ports
    for ingress in find(docs, "Ingress"):
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                service = find(docs, "Service", path["backend"]["service"]["name"])
                assert service and path["backend"]["service"]["port"]["name"] in {
                    p["name"] for p in service[0]["spec"]["ports"]
                }


def test_it_switches_the_overlay_to_external_datastores(rendered):
    base, overlay = rendered["base"], rendered["overlay"]
    assert {doc["metadata"]["name"] for doc in find(base, "StatefulSet")} == {"gpu-portal-postgres", "gpu-portal-redis"}
    assert not find(overlay, "StatefulSet")
    assert not [
        doc for doc in overlay if doc["metadata"]["name"].startswith(("gpu-portal-postgres", "gpu-portal-redis"))
    ]
    secret = settings_of(overlay)[1]
    assert "@gpu-portal-" not in secret["DATABASE_URL"] + secret["REDIS_URL"]
    images = {container["image"] for _, container in portal_containers(overlay)}
    assert images == {"registry.example.com/gpu-portal:0.1.0"}
    assert find(overlay, "Ingress") and not find(base, "Ingress")


def test_it_runs_one_deployment_per_procfile_process(rendered):
    for docs in rendered.values():
        processes = {}
        for doc, container in portal_containers(docs):
            if container in doc["spec"]["template"]["spec"]["containers"]:
                assert len(container["args"]) == 1, container["args"]
                processes[container["args"][0]] = doc
        assert set(processes) == set(procfile()) == {"web", "worker", "beat", "watcher", "scheduler"}
        beat = processes["beat"]["spec"]
        assert beat["replicas"] == 1 and beat["strategy"] == {"type": "Recreate"}
        migrate = beat["template"]["spec"]["initContainers"]
        assert [c["args"] for c in migrate] == [["python", "manage.py", "migrate", "--noinput"]]
        for process in ("web", "worker", "watcher", "scheduler"):
            (wait,) = processes[process]["spec"]["template"]["spec"]["initContainers"]
            assert "manage.py migrate --check" in wait["args"][-1]


def settings_of(docs: list[dict]) -> tuple[dict[str, str], dict[str, str]]:
    """The ConfigMap and Secret data the portal's pods get, decoded."""
    import base64

    (config,) = [doc for doc in find(docs, "ConfigMap") if doc["metadata"]["name"].startswith("gpu-portal-settings")]
    (secret,) = [
        doc for doc in find(docs, "Secret") if re.fullmatch(r"gpu-portal(-[a-z0-9]{10})?", doc["metadata"]["name"])
    ]
    decoded = {key: base64.b64decode(value).decode() for key, value in secret.get("data", {}).items()}
    return config["data"], decoded | secret.get("stringData", {})


@pytest.mark.parametrize("variant", ["base", "overlay"])
def test_it_sets_only_settings_the_code_reads(rendered, variant):
    docs = rendered[variant]
    read = names_the_code_reads()
    config, secret = settings_of(docs)
    assert set(config) <= read, f"ConfigMap keys nobody reads: {set(config) - read}"
    assert set(secret) <= read, f"Secret keys nobody reads: {set(secret) - read}"
    # The image collected its static files under its own PORTAL_DATA_ROOT (platform/Dockerfile).
    assert "PORTAL_DATA_ROOT" not in config
    for doc, container in portal_containers(docs):
        names = {variable["name"] for variable in container.get("env", [])}
        assert names <= read, f"{doc['metadata']['name']}/{container['name']}: {names - read} are not read by the code"
        for variable in container.get("env", []):
            if variable["name"].endswith("_FILE"):
                mount, key = variable["value"].rsplit("/", 1)
                assert key in secret and any(m["mountPath"] == mount for m in container["volumeMounts"])


@pytest.mark.parametrize("variant", ["base", "overlay"])
def test_it_gives_settings_that_the_portal_accepts(rendered, variant, tmp_path):
    """Start Django with exactly the environment of the web container; config/settings.py is strict."""
    docs = rendered[variant]
    config, secret = settings_of(docs)
    (web,) = [c for d, c in portal_containers(docs) if c["name"] == "web"]
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    for key, value in secret.items():
        (secrets_dir / key).write_text(value)
    environ = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PORTAL_DATA_ROOT": str(tmp_path / "data"),
        **config,
    }
    for variable in web["env"]:
        environ[variable["name"]] = str(secrets_dir / variable["value"].rsplit("/", 1)[1])
    environ["PORTAL_ARTIFACT_ROOT"] = str(tmp_path / "artifacts")  # /data/artifacts is the volume's mount
    script = (
        "import django, json; django.setup(); from django.conf import settings as s; print(json.dumps({"
        "'engine': s.DATABASES['default']['ENGINE'], 'broker': s.CELERY_BROKER_URL, 'hosts': s.ALLOWED_HOSTS,"
        "'debug': s.DEBUG, 'key': s.SECRET_KEY, 'channels': s.CHANNEL_LAYERS['default']['BACKEND']}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["engine"] == "django_prometheus.db.backends.postgresql"  # django.db.backends.postgresql, instrumented
    assert seen["broker"] == secret["REDIS_URL"] and seen["channels"] == "channels_redis.core.RedisChannelLayer"
    assert seen["key"] == secret["DJANGO_SECRET_KEY"] and seen["debug"] is False
    assert "localhost" in seen["hosts"]  # the probes' Host header
    assert not (tmp_path / "data" / "secret_key").exists()


@pytest.mark.parametrize("variant", ["base", "overlay"])
def test_it_probes_web_on_its_own_liveness_and_its_readiness_at_the_port_it_listens_on(rendered, variant):
    docs = rendered[variant]
    config, _ = settings_of(docs)
    (web,) = [c for d, c in portal_containers(docs) if c["name"] == "web"]
    assert web["ports"] == [{"name": "http", "containerPort": int(config["PORT"])}]
    paths = {}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = web[probe]["httpGet"]
        assert get["port"] == "http"
        assert get["httpHeaders"] == [{"name": "Host", "value": "localhost"}]
        paths[probe] = get["path"]
    # Liveness asks only web itself: a stale worker or a database outage must not restart web pods.
    assert paths == {
        "startupProbe": "/healthz/live",
        "readinessProbe": "/healthz/ready",
        "livenessProbe": "/healthz/live",
    }
    # /healthz/ready runs three checks of up to 3 s each.
    assert web["readinessProbe"]["timeoutSeconds"] >= 9


@pytest.mark.parametrize("variant", ["base", "overlay"])
def test_worker_beat_and_watcher_each_prove_their_own_liveness(rendered, variant):
    from django.conf import settings

    containers = {c["name"]: c for d, c in portal_containers(rendered[variant])}
    for name in ("worker", "beat", "watcher", "scheduler"):
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = containers[name][probe]["exec"]["command"]
            assert command[:5] == ["python", "manage.py", "heartbeat", "--check", name], (name, probe, command)
            max_age = float(command[command.index("--max-age") + 1])
            # Never tighter than /healthz's threshold (normal running never flaps), and the probe outlasts a start.
            assert max_age >= settings.PORTAL_HEALTH_MAX_AGE, (name, probe)
            assert containers[name][probe]["timeoutSeconds"] >= 20, (name, probe)  # a Django start per probe
        live = containers[name]["livenessProbe"]
        assert live["periodSeconds"] * live["failureThreshold"] >= 60, name


@pytest.mark.django_db
def test_the_liveness_probes_command_fails_on_a_stale_heartbeat_and_passes_on_a_fresh_one(rendered):
    from datetime import timedelta

    from django.core.management import CommandError, call_command
    from django.utils import timezone

    from core import heartbeats

    (worker,) = [c for d, c in portal_containers(rendered["base"]) if c["name"] == "worker"]
    args = worker["livenessProbe"]["exec"]["command"][3:]  # python manage.py heartbeat ...
    heartbeats.beat("worker", now=timezone.now() - timedelta(seconds=61))
    with pytest.raises(CommandError, match="last beat 61 s ago"):
        call_command("heartbeat", *args)
    heartbeats.beat("worker")
    call_command("heartbeat", *args)


@pytest.mark.parametrize("variant", ["base", "overlay"])
def test_it_runs_every_pod_unprivileged_with_resources(rendered, variant):
    for name, spec in pod_specs(rendered[variant]).items():
        security = spec["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] != 0, name
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not spec.get("hostNetwork") and not spec.get("hostPID"), name
        assert not [v for v in spec.get("volumes", []) if "hostPath" in v], name
        for container in spec.get("initContainers", []) + spec["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}, name
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name
            assert "memory" in container["resources"]["limits"], name
    for doc, _ in portal_containers(rendered[variant]):
        spec = doc["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsUser"] == PORTAL_UID == dockerfile_user()
        # Only the processes that call the Kubernetes API get its token.
        assert (spec.get("serviceAccountName") == "gpu-portal") == (
            spec.get("automountServiceAccountToken", True) is True
        )


# ------------------------------------------------------------------------------------------- RBAC


def test_it_grants_exactly_what_the_portal_touches_and_no_wildcard():
    docs = load_documents(BASE / "rbac.yaml")
    roles = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] in ("ClusterRole", "Role")}
    granted = {}
    for name, role in roles.items():
        granted[name] = {}
        for rule in role["rules"]:
            assert set(rule) == {"apiGroups", "resources", "verbs"}, f"{name}: only plain rules ({set(rule)})"
            for field in ("apiGroups", "resources", "verbs"):
                assert not [v for v in rule[field] if "*" in v], f"{name}: wildcard in {field}"
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    granted[name].setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == RBAC
    bindings = [doc for doc in docs if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert sorted(b["roleRef"]["name"] for b in bindings) == sorted(RBAC)
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-portal"}]
    every = {resource for table in RBAC.values() for (_, resource) in table}
    assert not every & {"secrets", "roles", "rolebindings", "clusterroles", "clusterrolebindings", "nodes"}


def test_it_installs_the_portals_priority_classes_as_the_portal_writes_them():
    from clusters.k8s import ClusterSettings, priority_class_manifests
    from demo.data import PRIORITIES

    installed = {doc["metadata"]["name"]: doc for doc in load_documents(BASE / "priorityclasses.yaml")}
    expected = {doc["metadata"]["name"]: doc for doc in priority_class_manifests(PRIORITIES, ClusterSettings())}
    assert installed == expected
    assert {doc["value"] for doc in installed.values()} == {1000, 500, 100}
    # The portal alone decides evictions, for whole gangs: kube-scheduler must never preempt for these.
    assert {doc["preemptionPolicy"] for doc in installed.values()} == {"Never"}
