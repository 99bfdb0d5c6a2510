"""platform/: the image and the manifests that deploy the portal itself (platform/README.md).

No cluster and no Docker engine here, so: every YAML document parses; every file a kustomization names
exists; every resource file, and the base and the example overlay as rendered by `kubectl kustomize`
(when kubectl is installed), passes kubernetes-validate in strict mode; RBAC is exactly the table below;
the settings the manifests give are the ones config/settings.py reads, and it accepts their values; the
image's entrypoint starts the same command lines as platform/Procfile.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PLATFORM = ROOT / "platform"
KUSTOMIZE = PLATFORM / "kustomize"
BASE, OVERLAY = KUSTOMIZE / "base", KUSTOMIZE / "overlays" / "example"
KUSTOMIZATIONS = sorted(KUSTOMIZE.rglob("kustomization.yaml"))
KUBERNETES_VERSION = "1.32"  # the oldest Kubernetes the portal supports (as clusters/manifest_validation.py)
PORTAL_IMAGE = "gpu-portal"  # the base's image name; overlays point it at a registry
PORTAL_UID = 10001

# Exactly what the portal touches on a cluster: (API group, resource) -> verbs.
RBAC = {
    "gpu-portal-cluster": {
        ("", "namespaces"): {"get", "list", "create", "patch"},
        ("scheduling.k8s.io", "priorityclasses"): {"get", "list", "create", "patch"},
    },
    "gpu-portal-workloads": {
        ("", "resourcequotas"): {"get", "list", "create", "patch"},
        ("networking.k8s.io", "networkpolicies"): {"get", "list", "create", "patch"},
        ("", "persistentvolumeclaims"): {"get", "list", "create"},
        ("", "pods"): {"get", "list", "watch"},
        ("", "pods/log"): {"get"},
        ("kubeflow.org", "pytorchjobs"): {"get", "list", "watch", "create", "patch", "delete"},
        ("kubeflow.org", "tfjobs"): {"get", "list", "watch", "create", "patch", "delete"},
        ("kubeflow.org", "mpijobs"): {"get", "list", "watch", "create", "patch", "delete"},
        ("batch", "jobs"): {"get", "list", "watch", "create", "patch", "delete"},
        ("", "configmaps"): {"get", "create", "delete"},
        ("serving.kserve.io", "inferenceservices"): {"get", "list", "watch", "create", "patch", "delete"},
        ("apps", "deployments"): {"get", "list", "watch", "create", "patch", "delete"},
        ("", "services"): {"get", "list", "watch", "create", "patch", "delete"},
    },
}


def load_documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def kustomization(path: Path) -> dict:
    return yaml.safe_load((path / "kustomization.yaml").read_text())


def read_env_file(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            pairs[name.strip()] = value
    return pairs


def validate(doc: dict) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def resource_files(folder: Path) -> list[Path]:
    return [folder / entry for entry in kustomization(folder).get("resources", []) if (folder / entry).is_file()]


def procfile() -> dict[str, str]:
    lines = (PLATFORM / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip() and not line.startswith("#"))


def names_the_code_reads() -> set[str]:
    """Setting names read through core/env.py (config/), plus those the Procfile's command lines use."""
    code = "\n".join(path.read_text() for path in (ROOT / "config").glob("*.py"))
    names = set(re.findall(r"\benv\.(?:str|bool|int|list|rate|url|raw)\(\s*\"([A-Z][A-Z0-9_]*)\"", code))
    names |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", (PLATFORM / "Procfile").read_text()))
    assert {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "PORTAL_BIND"} <= names  # the reader finds them
    return names | {f"{name}_FILE" for name in names}  # core/env.py: any setting may come from a file


# ------------------------------------------------------------------------------------------ files


def test_it_lists_every_setting_in_env_example():
    """platform/env.example lists every setting the portal reads: config/, the Procfile, the demo command."""
    listed = set(read_env_file(PLATFORM / "env.example"))
    sources = [ROOT / "demo" / "management" / "commands" / "demo.py", ROOT / "demo" / "data.py"]
    others = set(re.findall(r"os\.environ\.get\(\s*\"(PORTAL_[A-Z0-9_]+)\"", "\n".join(p.read_text() for p in sources)))
    read = {name for name in names_the_code_reads() if not name.endswith("_FILE")} | others
    assert listed == read, f"missing: {read - listed}, not read: {listed - read}"


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


def test_it_marks_every_example_secret_value():
    for folder in (BASE, OVERLAY):
        for generator in kustomization(folder).get("secretGenerator", []):
            for entry in generator["envs"]:
                assert "example" in entry
                for name, value in read_env_file(folder / entry).items():
                    assert "EXAMPLE-ONLY" in value or name == "REDIS_URL", (
                        f"{entry}: {name} is not marked as an example"
                    )


def test_it_gives_the_in_cluster_postgres_the_password_in_database_url():
    url = read_env_file(BASE / "secret.example.env")["DATABASE_URL"]
    password = read_env_file(BASE / "postgres.example.env")["POSTGRES_PASSWORD"]
    assert re.match(rf"postgres://portal:{re.escape(password)}@gpu-portal-postgres:5432/portal$", url)


def container_of(path: Path, kind: str, name: str) -> dict:
    (doc,) = [d for d in load_documents(path) if d["kind"] == kind]
    return next(c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def env_sources(container: dict) -> dict[str, dict | str]:
    return {
        item["name"]: item.get("valueFrom", {}).get("secretKeyRef") or item.get("value") for item in container["env"]
    }


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
        for name in ("web", "worker", "beat", "watcher", "postgres", "redis")
    }
    for store, port in (("postgres", "postgres"), ("redis", "redis")):
        for process in ("web", "worker", "beat", "watcher"):
            assert admitted(policies, labels[process], labels[store], port), (process, store)
        assert not admitted(policies, None, labels[store], port)  # a job pod, another namespace
        assert not admitted(policies, {"app.kubernetes.io/name": "intruder"}, labels[store], port)
    assert admitted(policies, None, labels["web"], "http")
    assert not admitted(policies, None, labels["worker"], "http") and not admitted(
        policies, None, labels["web"], "redis"
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
        assert set(processes) == set(procfile()) == {"web", "worker", "beat", "watcher"}
        beat = processes["beat"]["spec"]
        assert beat["replicas"] == 1 and beat["strategy"] == {"type": "Recreate"}
        migrate = beat["template"]["spec"]["initContainers"]
        assert [c["args"] for c in migrate] == [["python", "manage.py", "migrate", "--noinput"]]
        for process in ("web", "worker", "watcher"):
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
    assert seen["engine"] == "django.db.backends.postgresql"
    assert seen["broker"] == secret["REDIS_URL"] and seen["channels"] == "channels_redis.core.RedisChannelLayer"
    assert seen["key"] == secret["DJANGO_SECRET_KEY"] and seen["debug"] is False
    assert "localhost" in seen["hosts"]  # the probes' Host header
    assert not (tmp_path / "data" / "secret_key").exists()


@pytest.mark.parametrize("variant", ["base", "overlay"])
def test_it_probes_web_on_healthz_at_the_port_daphne_listens_on(rendered, variant):
    docs = rendered[variant]
    config, _ = settings_of(docs)
    (web,) = [c for d, c in portal_containers(docs) if c["name"] == "web"]
    assert web["ports"] == [{"name": "http", "containerPort": int(config["PORT"])}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = web[probe]["httpGet"]
        assert (get["path"], get["port"]) == ("/healthz", "http")
        assert get["httpHeaders"] == [{"name": "Host", "value": "localhost"}]
        # /healthz runs three checks of up to 3 s each.
        assert web[probe]["timeoutSeconds"] >= 9


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


# ------------------------------------------------------------------------------- image and Procfile


def dockerfile() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (PLATFORM / "Dockerfile").read_text())
    return [
        tuple(line.split(None, 1)) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def instruction(name: str) -> list[str]:
    return [argument for keyword, argument in dockerfile() if keyword.upper() == name]


def dockerfile_user() -> int:
    (user,) = instruction("USER")
    return int(user.split(":")[0])


def test_it_builds_one_unprivileged_image_for_every_process():
    assert instruction("FROM") == ["python:3.11-slim"]
    assert dockerfile_user() == PORTAL_UID
    assert instruction("WORKDIR") == ["/app"]
    runs = " ".join(instruction("RUN"))
    assert "apt-get install -y --no-install-recommends git" in runs
    assert "pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock" in runs
    assert "manage.py collectstatic --noinput" in runs
    (env,) = instruction("ENV")
    assert "PORTAL_DATA_ROOT=/app/var" in env and "PORTAL_BIND=0.0.0.0" in env and "PATH=/app/.venv/bin:$PATH" in env
    # The venv is where the Procfile's command lines find it, relative to WORKDIR.
    assert all(line.startswith(".venv/bin/") for line in procfile().values())
    assert "python -m venv .venv" in runs
    assert [json.loads(e) for e in instruction("ENTRYPOINT")] == [["sh", "/app/platform/docker-entrypoint.sh"]]
    assert [json.loads(c) for c in instruction("CMD")] == [["web"]]
    # The requirements the image installs are all pinned, each with its hashes.
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[0-9][^ ]* \\", line), line


@pytest.fixture
def image_tree(tmp_path):
    """The image's /app as far as the entrypoint sees it, with programs that print their arguments."""
    (tmp_path / "platform").mkdir()
    shutil.copy(PLATFORM / "docker-entrypoint.sh", tmp_path / "platform")
    shutil.copy(PLATFORM / "Procfile", tmp_path / "platform")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for program in ("daphne", "celery"):
        (bin_dir / program).write_text(f'#!/bin/sh\nprintf "%s\\n" "{program}" "$@"\n')
        (bin_dir / program).chmod(0o755)
    return tmp_path


def run_entrypoint(tree: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {"PATH": os.environ["PATH"], **env}
    # From another folder: the image's WORKDIR is /app, but the script must not depend on it.
    return subprocess.run(
        ["sh", str(tree / "platform" / "docker-entrypoint.sh"), *args],
        cwd="/",
        env=environ,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_it_starts_the_procfiles_command_lines_in_the_image(image_tree):
    web = run_entrypoint(image_tree, "web", PORT="8123", PORTAL_BIND="0.0.0.0")
    assert web.returncode == 0, web.stderr
    assert web.stdout.split("\n")[:-1] == [
        "daphne",
        "--bind",
        "0.0.0.0",
        "--port",
        "8123",
        "--proxy-headers",
        "config.asgi:application",
    ]
    worker = run_entrypoint(image_tree, "worker", PORTAL_LOG_LEVEL="WARNING", HOSTNAME="pod-1")
    assert worker.stdout.split("\n")[:-1] == [
        "celery",
        "--app",
        "config",
        "worker",
        "--loglevel",
        "WARNING",
        "--concurrency",
        "2",
        "--hostname",
        "worker@%h",
    ]
    beat = run_entrypoint(image_tree, "beat")
    assert beat.stdout.split("\n")[:-1] == ["celery", "--app", "config", "beat", "--loglevel", "INFO"]
    default = run_entrypoint(image_tree)
    assert default.stdout.split("\n")[0] == "daphne"


def test_it_runs_any_other_command_as_given_in_the_image(image_tree):
    done = run_entrypoint(image_tree, "sh", "-c", 'echo "$0 $1"', "migrate", "--noinput")
    assert (done.returncode, done.stdout) == (0, "migrate --noinput\n")
    refused = run_entrypoint(image_tree, "web", "--port", "1")
    assert refused.returncode == 64 and "takes no arguments" in refused.stderr


def test_it_keeps_local_state_out_of_the_build_context_but_not_the_code():
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        return any(
            fnmatch(prefix, pattern.removeprefix("**/")) or fnmatch(prefix, pattern)
            for prefix in prefixes
            for pattern in patterns
        )

    for path in (
        ".venv/bin/python",
        "var/portal.sqlite3",
        ".git/HEAD",
        "var/secret_key",
        "platform/kustomize/overlays/example/secret.example.env",
        "jobs/__pycache__/x.pyc",
    ):
        assert ignored(path), path
    for path in (
        "requirements.txt",
        "requirements.lock",
        "manage.py",
        "platform/Procfile",
        "platform/docker-entrypoint.sh",
        "config/settings.py",
        "locale/zh_Hans/LC_MESSAGES/django.mo",
        "examples/digits/train.py",
        "frontend/static/frontend/portal.css",
    ):
        assert not ignored(path), path
