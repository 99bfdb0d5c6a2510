"""Model servers of deployments: one per variant, kept running (docs/architecture.md "The serving path").

Owns the ModelServer rows: servers_reconcile starts missing servers, notices ready and crashed ones,
restarts crashed ones with backoff and a restart count, and stops those of removed variants (and orphans
whose rows are gone); servers_stop stops them, servers_stop_local those on this host when the portal stops.
server_verify answers the router whether the process on a
local server's port is still the one the portal started (a job could kill it and bind its port); one that
is not is marked failed (NOT_OURS) and started again, on a new port, like a crashed one. The servers themselves are the serving backend's, chosen
by the deployment's cluster: local processes (serving/backends/local.py) or KServe
InferenceServices (serving/backends/kubernetes.py), adapters like the executors. Rules about
deployments, variants and rollouts are in serving/services.py (writes) and serving/selectors.py (reads).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypedDict, overload

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from clusters.errors import ExecutorError
from clusters.k8s import ManifestError
from clusters.models import Cluster
from clusters.services import cluster_settings, kube_for
from models_registry.artifacts import ArtifactError, artifact_path, store_root
from models_registry.models import ModelVersion
from serving.backends.kubernetes import KServeSpec, KubernetesServingBackend
from serving.backends.local import LocalServingBackend, ServerProcess, ServerSpec, ServingBackend, ServingError
from serving.backends.manifests import InferenceTarget, ServingSettings
from serving.models import Deployment, ModelServer, Variant
from serving.selectors import server_model_name

logger = logging.getLogger(__name__)

START_TIMEOUT = timedelta(seconds=60)  # a server not ready by then is killed and started again
MAX_BACKOFF_SECONDS = 60
# Only tests inject latency or errors into model servers (ModelVersion.tags "fault.delay_ms", "fault.fail_rate").
FAULT_TAGS = ("delay_ms", "fail_rate")

NOT_OURS = "This server's process is not the one the portal started; it was stopped and will be started again."

STARTING, READY, FAILED, STOPPED = (
    ModelServer.Status.STARTING,
    ModelServer.Status.READY,
    ModelServer.Status.FAILED,
    ModelServer.Status.STOPPED,
)


@overload
def serving_backend(cluster: None = None) -> LocalServingBackend: ...
@overload
def serving_backend(cluster: Cluster | None) -> ServingBackend: ...
def serving_backend(cluster: Cluster | None = None) -> ServingBackend:
    """The backend of a deployment's cluster: local processes without one (or on a local cluster)."""
    if cluster is None or cluster.backend == Cluster.Backend.LOCAL:
        # A trusted cluster (isolation: none) runs its model servers as plain processes, like its jobs.
        trusted = cluster is not None and cluster.settings.get("isolation") == "none"
        return LocalServingBackend(Path(settings.PORTAL_DATA_ROOT) / "serving", sandboxed=False if trusted else None)
    if cluster.backend == Cluster.Backend.KUBERNETES:
        try:
            return KubernetesServingBackend(
                kube_for(cluster), ServingSettings.from_settings(cluster.name, cluster.settings)
            )
        except (ExecutorError, ManifestError) as exc:
            raise ServingError(getattr(exc, "message", str(exc)), permanent=True) from exc
    raise ServingError(
        f"Cluster {cluster.name} uses the {cluster.backend} backend, which cannot serve models.", permanent=True
    )


class _Backends(dict):
    """The backends of one reconcile, by cluster id (None: local)."""

    def of(self, cluster: Cluster | None) -> ServingBackend:
        key = cluster.pk if cluster is not None and cluster.backend != Cluster.Backend.LOCAL else None
        if key not in self:
            self[key] = serving_backend(cluster if key is not None else None)
        return self[key]


def servers_reconcile(*, now: datetime | None = None) -> dict[str, int]:
    """Keep exactly one ready server per variant: start missing ones, notice ready and dead ones, restart
    crashed ones with backoff, stop the servers of variants that no longer exist."""
    now = now or timezone.now()
    backends = _Backends()
    counts = {"started": 0, "ready": 0, "restarted": 0, "stopped": 0}
    for variant in Variant.objects.select_related("version__model", "deployment__cluster", "deployment__department"):
        try:
            backend = backends.of(variant.deployment.cluster)
            _reconcile_one(variant, backend, counts, now=now)
        except ServingError as exc:
            # The cluster cannot be asked right now (or is misconfigured): say so on the row, try again later.
            ModelServer.objects.filter(variant=variant).exclude(status=READY).update(
                message=exc.message, checked_at=now
            )
            logger.warning("model server of variant %s: %s", variant.pk, exc.message)
    counts["stopped"] = _stop_orphans(backends)
    return counts


def _reconcile_one(variant: Variant, backend: ServingBackend, counts: dict[str, int], *, now: datetime) -> None:
    server, _ = ModelServer.objects.get_or_create(variant=variant, defaults={"status": STOPPED})
    process = _process(server, variant)
    if server.status == READY:
        if process is not None and backend.alive(process):
            if _owns(backend, process):
                return
            message = NOT_OURS
        else:
            message = "The server exited; restarting it." + _tail(backend, variant)
        if process is not None:
            backend.stop(process)  # a failed InferenceService stays until deleted; a dead process: no-op
        ModelServer.objects.filter(pk=server.pk, status=READY, pid=server.pid).update(
            status=FAILED, checked_at=now, message=message
        )
        server.refresh_from_db()
    if server.status == STARTING:
        if process is not None and backend.alive(process):
            if backend.ready(process):
                if not _owns(backend, process):  # another process answers on its port
                    backend.stop(process)
                    ModelServer.objects.filter(pk=server.pk, status=STARTING, pid=server.pid).update(
                        status=FAILED, checked_at=now, message=NOT_OURS
                    )
                    return
                counts["ready"] += ModelServer.objects.filter(pk=server.pk, status=STARTING, pid=server.pid).update(
                    status=READY, checked_at=now, message="", url=_url(backend, process)
                )
                return
            if server.started_at and now - server.started_at < START_TIMEOUT:
                return
            backend.stop(process)
            message = f"Not ready after {int(START_TIMEOUT.total_seconds())} s; restarting it."
        elif process is None and server.started_at and now - server.started_at < START_TIMEOUT:
            return  # someone else is starting it right now
        else:
            message = "The server exited while starting." + _tail(backend, variant)
            if process is not None:
                backend.stop(process)
        ModelServer.objects.filter(pk=server.pk, status=STARTING, pid=server.pid).update(
            status=FAILED, checked_at=now, message=message
        )
        server.refresh_from_db()
    if server.status == FAILED:
        waited = (now - server.checked_at).total_seconds() if server.checked_at else MAX_BACKOFF_SECONDS
        if waited < backoff_seconds(server.restarts):
            return
        counts["restarted"] += _start(server, variant, backend, now=now, restart=True)
    elif server.status == STOPPED:
        counts["started"] += _start(server, variant, backend, now=now, restart=False)


@dataclass(frozen=True)
class Owner:
    """server_verify's answer: may the router send to that address, and which process to watch meanwhile."""

    ours: bool
    message: str = ""
    pid: int | None = None  # a local server's process, and its start time: looked at on every request
    started: int | None = None


def server_verify(*, variant_id: int, host: str, port: int) -> Owner:
    """Is host:port, where the router would send the variant's requests, served by the process the portal
    started for it? A local server that is not is stopped and marked failed; servers_reconcile starts it again."""
    server = (
        ModelServer.objects.select_related("variant__version__model", "variant__deployment__cluster")
        .filter(variant_id=variant_id)
        .first()
    )
    if server is None or server.status != READY:
        return Owner(ours=False, message="Its model server is not ready any more; try again shortly.")
    cluster = server.variant.deployment.cluster
    if cluster is not None and cluster.backend != Cluster.Backend.LOCAL:
        return Owner(ours=True)  # an InferenceService in the department's namespace, not a port on this host
    if server.url != f"http://{host}:{port}":
        return Owner(ours=False, message="Its model server moved; try again shortly.")
    backend = serving_backend(None)
    process = _process(server, server.variant)
    if process is not None and backend.owns(process):
        return Owner(ours=True, pid=process.pid, started=int(process.handle) if process.handle else None)
    exited = process is None or (not backend.alive(process) and not backend.ready(process))
    message = "The server exited; restarting it." if exited else NOT_OURS
    if (
        ModelServer.objects.filter(pk=server.pk, status=READY, pid=server.pid).update(
            status=FAILED, checked_at=timezone.now(), message=message
        )
        and process is not None
    ):
        backend.stop(process)  # only our own process: its pid and start time are checked, never the one on the port
    return Owner(ours=False, message=message)


def _owns(backend: ServingBackend, process: ServerProcess) -> bool:
    return not isinstance(backend, LocalServingBackend) or backend.owns(process)


def backoff_seconds(restarts: int) -> float:
    """0 for the first restart, then 1, 2, 4 ... up to MAX_BACKOFF_SECONDS."""
    return 0 if restarts == 0 else min(MAX_BACKOFF_SECONDS, 2 ** (restarts - 1))


def servers_stop(*, deployment: Deployment | None = None) -> int:
    """Stop the servers of one deployment (or of all): tests' teardown, and a deployment's deletion."""
    backends = _Backends()
    servers = ModelServer.objects.select_related("variant__version__model", "variant__deployment__cluster")
    if deployment is not None:
        servers = servers.filter(variant__deployment=deployment)
    stopped = 0
    for server in servers:
        process = _process(server, server.variant)
        if process is not None:
            try:
                backends.of(server.variant.deployment.cluster).stop(process)
            except ServingError as exc:
                logger.warning("stopping the model server of variant %s: %s", server.variant_id, exc.message)
            else:
                stopped += 1
        ModelServer.objects.filter(pk=server.pk).update(status=STOPPED, pid=None, url="", handle="", message="Stopped.")
    return stopped + _stop_orphans(backends)


def servers_stop_local() -> int:
    """Stop every model server process on this host (the portal is stopping: they are detached and would outlive
    it), those of a row and orphans alike (the local backend's own records), and mark the local rows stopped so
    that the next servers_reconcile starts them again. InferenceServices on clusters are left serving."""
    backend = serving_backend(None)
    local = ModelServer.objects.select_related("variant__version__model").filter(
        Q(variant__deployment__cluster__isnull=True) | Q(variant__deployment__cluster__backend=Cluster.Backend.LOCAL)
    )
    processes = {(p.pid, p.handle): p for p in backend.running().values()}
    for server in local.exclude(status=STOPPED):
        if (process := _process(server, server.variant)) is not None and backend.alive(process):
            processes.setdefault((process.pid, process.handle), process)
    for process in processes.values():
        backend.stop(process)  # only a process whose pid and start time are the ones recorded
    local.exclude(status=STOPPED).update(
        status=STOPPED, pid=None, url="", handle="", message="Stopped with the portal; it starts again with it."
    )
    return len(processes)


def _start(server: ModelServer, variant: Variant, backend: ServingBackend, *, now: datetime, restart: bool) -> int:
    # Claimed with a conditional update, so that two reconcilers never start two servers for one variant.
    claimed = ModelServer.objects.filter(pk=server.pk, status=server.status, pid=server.pid).update(
        status=STARTING,
        pid=None,
        url="",
        handle="",
        started_at=now,
        checked_at=now,
        restarts=F("restarts") + (1 if restart else 0),
        message="Starting.",
    )
    if not claimed:
        return 0
    try:
        process = backend.start(_spec(variant))
    except (ServingError, ArtifactError, ExecutorError) as exc:
        ModelServer.objects.filter(pk=server.pk).update(
            status=FAILED, message=getattr(exc, "message", str(exc)), checked_at=now
        )
        return 0
    ModelServer.objects.filter(pk=server.pk).update(url=process.url, pid=process.pid, handle=process.handle)
    return 1


class _CommonSpec(TypedDict):
    """What a ServerSpec and a KServeSpec share."""

    server_id: int
    model_name: str
    artifact: Path
    store_root: Path
    faults: dict


def _spec(variant: Variant) -> ServerSpec:
    version, cluster = variant.version, variant.deployment.cluster
    common: _CommonSpec = {
        "server_id": variant.pk,
        "model_name": server_model_name(variant),
        "artifact": artifact_path(version),
        "store_root": store_root(),
        "faults": _faults(version),
    }
    if cluster is None or cluster.backend == Cluster.Backend.LOCAL:
        return ServerSpec(**common)
    department = variant.deployment.department.slug
    target = InferenceTarget(
        server_id=variant.pk,
        deployment=variant.deployment.name,
        variant=variant.name,
        department=department,
        namespace=cluster_settings(cluster).namespace(department),
        artifact_uri=version.artifact_uri,
        framework=version.framework,
        replicas=variant.replicas,
    )
    return KServeSpec(**common, target=target)


def _url(backend: ServingBackend, process: ServerProcess) -> str:
    # An InferenceService gets its address only once KServe has made it; a local server has it from the start.
    return backend.url(process) if isinstance(backend, KubernetesServingBackend) else process.url


def _stop_orphans(backends: _Backends) -> int:
    """Servers whose variant is gone (removed by an update, or its deployment deleted), on this host and on
    every Kubernetes cluster set up for serving (those with an artifact_uri_prefix)."""
    backends.of(None)
    for cluster in Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES):
        if cluster.settings.get("artifact_uri_prefix"):
            try:
                backends.of(cluster)
            except ServingError as exc:
                logger.warning("cluster %s: %s", cluster.name, exc.message)
    stopped = 0
    for backend in backends.values():
        try:
            running = backend.running()
            orphans = set(running) - set(Variant.objects.filter(pk__in=list(running)).values_list("pk", flat=True))
            for server_id in orphans:
                backend.stop(running[server_id])
                backend.forget(server_id)
                stopped += 1
        except ServingError as exc:
            logger.warning("looking for orphaned model servers: %s", exc.message)
    return stopped


def _process(server: ModelServer, variant: Variant) -> ServerProcess | None:
    """What the backend knows the server by: a process (url + pid) or an InferenceService (handle "ns/name")."""
    on_cluster = "/" in server.handle
    if not on_cluster and (not server.url or server.pid is None):
        return None
    return ServerProcess(url=server.url, model_name=server_model_name(variant), pid=server.pid, handle=server.handle)


def _faults(version: ModelVersion) -> dict:
    if not getattr(settings, "PORTAL_SERVING_FAULT_INJECTION", False):
        return {}
    return {name: version.tags[f"fault.{name}"] for name in FAULT_TAGS if f"fault.{name}" in (version.tags or {})}


def _tail(backend: ServingBackend, variant: Variant) -> str:
    output = backend.output(variant.pk)
    return f"\n{output}" if output else ""
