"""Model servers of deployments: one per variant, kept running (DESIGN.md "Models and serving").

Owns the ModelServer rows: servers_reconcile starts missing servers, notices ready and crashed ones,
restarts crashed ones with backoff and a restart count, and stops those of removed variants (and orphans
whose rows are gone); servers_stop stops them. The processes themselves are the serving backend's
(models_registry/serving/local.py, an adapter like the executors). Rules about deployments, variants and
rollouts are in models_registry/deployments.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from models_registry.artifacts import ArtifactError, artifact_path, store_root
from models_registry.models import Deployment, ModelServer, ModelVersion, Variant
from models_registry.serving.local import LocalServingBackend, ServerProcess, ServerSpec, ServingBackend, ServingError

START_TIMEOUT = timedelta(seconds=60)  # a server not ready by then is killed and started again
MAX_BACKOFF_SECONDS = 60
# Only tests inject latency or errors into model servers (ModelVersion.tags "fault.delay_ms", "fault.fail_rate").
FAULT_TAGS = ("delay_ms", "fail_rate")

STARTING, READY, FAILED, STOPPED = (ModelServer.Status.STARTING, ModelServer.Status.READY,
                                    ModelServer.Status.FAILED, ModelServer.Status.STOPPED)


def serving_backend() -> ServingBackend:
    return LocalServingBackend(Path(settings.PORTAL_DATA_ROOT) / "serving")


def servers_reconcile(*, now: datetime | None = None) -> dict[str, int]:
    """Keep exactly one ready server per variant: start missing ones, notice ready and dead ones, restart
    crashed ones with backoff, stop the processes of variants that no longer exist."""
    now = now or timezone.now()
    backend = serving_backend()
    counts = {"started": 0, "ready": 0, "restarted": 0, "stopped": 0}
    variants = Variant.objects.select_related("version__model", "deployment")
    for variant in variants:
        server, _ = ModelServer.objects.get_or_create(variant=variant, defaults={"status": STOPPED})
        process = _process(server, variant)
        if server.status == READY:
            if process is not None and backend.alive(process):
                continue
            ModelServer.objects.filter(pk=server.pk, status=READY, pid=server.pid).update(
                status=FAILED, checked_at=now, message="The server exited; restarting it." + _tail(backend, variant))
            server.refresh_from_db()
        if server.status == STARTING:
            if process is not None and backend.alive(process):
                if backend.ready(process):
                    counts["ready"] += ModelServer.objects.filter(pk=server.pk, status=STARTING, pid=server.pid).update(
                        status=READY, checked_at=now, message="")
                    continue
                if server.started_at and now - server.started_at < START_TIMEOUT:
                    continue
                backend.stop(process)
                message = f"Not ready after {int(START_TIMEOUT.total_seconds())} s; restarting it."
            elif process is None and server.started_at and now - server.started_at < START_TIMEOUT:
                continue  # someone else is starting it right now
            else:
                message = "The server exited while starting." + _tail(backend, variant)
            ModelServer.objects.filter(pk=server.pk, status=STARTING, pid=server.pid).update(
                status=FAILED, checked_at=now, message=message)
            server.refresh_from_db()
        if server.status == FAILED:
            waited = (now - server.checked_at).total_seconds() if server.checked_at else MAX_BACKOFF_SECONDS
            if waited < backoff_seconds(server.restarts):
                continue
            counts["restarted"] += _start(server, variant, backend, now=now, restart=True)
        elif server.status == STOPPED:
            counts["started"] += _start(server, variant, backend, now=now, restart=False)
    counts["stopped"] = _stop_orphans(backend)
    return counts


def backoff_seconds(restarts: int) -> float:
    """0 for the first restart, then 1, 2, 4 ... up to MAX_BACKOFF_SECONDS."""
    return 0 if restarts == 0 else min(MAX_BACKOFF_SECONDS, 2 ** (restarts - 1))


def servers_stop(*, deployment: Deployment | None = None) -> int:
    """Stop the servers of one deployment (or of all): tests' teardown, and a deployment's deletion."""
    backend = serving_backend()
    servers = ModelServer.objects.select_related("variant__version__model")
    if deployment is not None:
        servers = servers.filter(variant__deployment=deployment)
    stopped = 0
    for server in servers:
        process = _process(server, server.variant)
        if process is not None:
            backend.stop(process)
            stopped += 1
        ModelServer.objects.filter(pk=server.pk).update(status=STOPPED, pid=None, url="", message="Stopped.")
    return stopped + _stop_orphans(backend)


def _start(server: ModelServer, variant: Variant, backend: ServingBackend, *, now: datetime, restart: bool) -> int:
    # Claimed with a conditional update, so that two reconcilers never start two processes for one variant.
    claimed = ModelServer.objects.filter(pk=server.pk, status=server.status, pid=server.pid).update(
        status=STARTING, pid=None, url="", handle="", started_at=now, checked_at=now,
        restarts=F("restarts") + (1 if restart else 0), message="Starting.")
    if not claimed:
        return 0
    try:
        spec = ServerSpec(server_id=variant.pk, model_name=server_model_name(variant),
                          artifact=artifact_path(variant.version), store_root=store_root(), faults=_faults(variant.version))
        process = backend.start(spec)
    except (ServingError, ArtifactError) as exc:
        ModelServer.objects.filter(pk=server.pk).update(status=FAILED, message=str(exc), checked_at=now)
        return 0
    ModelServer.objects.filter(pk=server.pk).update(url=process.url, pid=process.pid, handle=process.handle)
    return 1


def _stop_orphans(backend: ServingBackend) -> int:
    """Processes whose variant is gone (removed by an update, or its deployment deleted)."""
    running = backend.running()
    orphans = set(running) - set(Variant.objects.filter(pk__in=list(running)).values_list("pk", flat=True))
    for server_id in orphans:
        backend.stop(running[server_id])
        backend.forget(server_id)
    return len(orphans)


def _process(server: ModelServer, variant: Variant) -> ServerProcess | None:
    if not server.url or server.pid is None:
        return None
    return ServerProcess(url=server.url, model_name=server_model_name(variant), pid=server.pid, handle=server.handle)


def server_model_name(variant: Variant) -> str:
    return variant.version.model.name


def _faults(version: ModelVersion) -> dict:
    if not getattr(settings, "PORTAL_SERVING_FAULT_INJECTION", False):
        return {}
    return {name: version.tags[f"fault.{name}"] for name in FAULT_TAGS if f"fault.{name}" in (version.tags or {})}


def _tail(backend: ServingBackend, variant: Variant) -> str:
    output = backend.output(variant.pk)
    return f"\n{output}" if output else ""


def server_view(variant: Variant) -> dict:
    server = getattr(variant, "server", None)
    if server is None:
        return {"status": "stopped", "restarts": 0, "message": "", "url": ""}
    return {"status": server.status, "restarts": server.restarts, "message": server.message, "url": server.url}
