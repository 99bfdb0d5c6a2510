"""A cluster's settings as the Kubernetes code reads them, its one cached client (``kube_for``: one ``Kube`` per
cluster, rebuilt when its settings change, shared by jobs, boards, builds and model servers), calling it
(``executor_call``: a transient failure becomes a Celery retry), and its health: checked (``cluster_health_check``),
stored with its time and message and logged once per change (``cluster_health_refresh``, from the reconcile tick
and from submissions that find the stored state stale), read for pages and selectors (``cluster_health``,
``cluster_choice_label``) and turned into a submission's refusal (``cluster_refusal``)."""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _

from clusters import health
from clusters.errors import ExecutorError
from clusters.health import Health
from clusters.k8s import ClusterSettings, ManifestError
from clusters.models import Cluster
from core.celery import TransientError

log = logging.getLogger(__name__)

_kube_clients: dict[int, tuple[str, object]] = {}  # cluster pk -> (its settings, its Kube): the one cache


def cluster_settings(cluster: Cluster) -> ClusterSettings:
    """How the portal uses a Kubernetes cluster (its settings JSON with defaults, GPU memory from its pools)."""
    try:
        return ClusterSettings.from_cluster(
            cluster.name,
            cluster.settings,
            [(pool.gpu_type, pool.gpu_memory_gb) for pool in cluster.pools.all()],
        )
    except ManifestError as exc:
        raise ExecutorError(str(exc), permanent=True) from exc


def kube_for(cluster: Cluster):
    """The cluster's ``clusters.kube.Kube`` (shared by jobs, boards and model servers)."""
    from clusters.kube import Kube

    key = json.dumps(cluster.settings, sort_keys=True)
    cached = _kube_clients.get(cluster.pk)
    if cached is None or cached[0] != key:
        cached = _kube_clients[cluster.pk] = (key, Kube.from_settings(cluster.settings))
    return cached[1]


def executor_call(operation):
    """Run a cluster operation: a transient ExecutorError becomes TransientError (Celery retries the task)."""
    try:
        return operation()
    except ExecutorError as exc:
        if exc.permanent:
            raise
        raise TransientError(exc.message) from exc


# --- Health (clusters/health.py decides; this checks, stores and logs) ------------------


def local_executor_root(cluster: Cluster) -> Path:
    """Where the local executor of ``cluster`` keeps its jobs' folders (jobs.running.executor_for)."""
    return Path(settings.PORTAL_DATA_ROOT) / "executors" / cluster.name


def _configuration_problem(cluster: Cluster) -> Health | None:
    """What makes the cluster unusable without asking it anything: no I/O but two looks at the environment."""
    default_kubeconfig = bool(os.environ.get("KUBECONFIG")) or Path("~/.kube/config").expanduser().is_file()
    return health.configuration_problem(
        cluster.backend,
        cluster.settings,
        in_cluster_available=bool(os.environ.get("KUBERNETES_SERVICE_HOST")),
        default_kubeconfig=default_kubeconfig,
    )


def cluster_health_check(cluster: Cluster) -> Health:
    """Check the cluster now: its settings, then its executor (local) or its API server and CRDs (Kubernetes)."""
    problem = _configuration_problem(cluster)
    if problem is not None:
        return problem
    if cluster.backend == Cluster.Backend.LOCAL:
        root = local_executor_root(cluster)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return health.from_local_probe(problem=f"Its job folder {root} cannot be made: {exc.strerror}.")
        if not os.access(root, os.W_OK | os.X_OK):
            return health.from_local_probe(problem=f"Its job folder {root} is not writable by the portal.")
        return health.from_local_probe()
    if cluster.backend != Cluster.Backend.KUBERNETES:
        return Health(health.UNREACHABLE, health.SETTINGS_INVALID, f"The {cluster.backend} backend is not available.")
    try:
        cluster_settings(cluster)
        kube = kube_for(cluster)
    except ExecutorError as exc:
        reason = health.NO_CONNECTION_SETTINGS if "connection settings" in exc.message else health.SETTINGS_INVALID
        return Health(health.UNREACHABLE, reason, exc.message[:500])
    try:
        served = kube.probe(list(health.TRAINING_OPERATOR_KINDS))
    except ExecutorError as exc:
        return health.from_kube_probe(answered=False, error=exc.message)
    return health.from_kube_probe(answered=True, served_kinds=served)


def cluster_health_refresh(cluster: Cluster, *, now: datetime | None = None, force: bool = False) -> Health:
    """The cluster's health, checked again when the stored one is older than CHECK_EVERY_SECONDS (or ``force``).

    The result is stored on the row (a conditional update: of concurrent checks, one records a change) and a
    change of state is logged in one line (clusters.health.change_line), never a traceback per tick.
    """
    now = now or timezone.now()
    checked = cluster.health_checked_at
    fresh = checked is not None and 0 <= (now - checked).total_seconds() < health.CHECK_EVERY_SECONDS
    if fresh and not force and cluster.health != health.UNKNOWN:
        return cluster_health(cluster)
    new = cluster_health_check(cluster)
    previous_state, previous_reason = cluster.health, cluster.health_reason
    fields = {
        "health": new.state,
        "health_reason": new.reason,
        "health_message": new.message[:500],
        "health_checked_at": now,
    }
    if previous_state != new.state or cluster.health_since is None:
        fields["health_since"] = now
    won = Cluster.objects.filter(pk=cluster.pk, health=previous_state, health_reason=previous_reason).update(**fields)
    if won:
        line = health.change_line(cluster.name, previous_state, new)
        if line:
            (log.info if new.state == health.REACHABLE else log.warning)(line)
        for name, value in fields.items():
            setattr(cluster, name, value)
    else:  # another process recorded a change first: take what it found
        cluster.refresh_from_db(fields=list(fields) + ["health_since"])
    return cluster_health(cluster)


def clusters_health_refresh(*, now: datetime | None = None) -> dict[int, Health]:
    """Check every cluster whose stored health is stale (the reconcile tick); cluster pk -> its health."""
    return {cluster.pk: cluster_health_refresh(cluster, now=now) for cluster in Cluster.objects.all()}


def cluster_health(cluster: Cluster) -> Health:
    """The cluster's health as last stored (no network call; a problem of its settings shows at once)."""
    return _configuration_problem(cluster) or Health(cluster.health, cluster.health_reason, cluster.health_message)


def cluster_refusal(cluster: Cluster, *, what: str = "jobs", now: datetime | None = None) -> str | None:
    """Why nothing can be submitted to the cluster now (None: it takes work); checks it first when stale."""
    return health.refusal(cluster.name, cluster_health_refresh(cluster, now=now), what)


def cluster_health_shown(cluster: Cluster) -> dict:
    """The cluster's health for its pages: state, reason and its translated label, message, when checked, since."""
    found = cluster_health(cluster)
    reason = Cluster.HealthReason(found.reason).label if found.reason in Cluster.HealthReason.values else ""
    return {
        "state": found.state,
        "usable": found.usable,
        "reason": found.reason,
        "reason_label": reason,
        "message": found.message,
        "checked_at": cluster.health_checked_at,
        "since": cluster.health_since,
    }


def cluster_choice_label(cluster: Cluster) -> str:
    """The cluster as a selector offers it: "k8s-demo (unreachable: no connection settings)"."""
    found = cluster_health(cluster)
    if found.usable:
        return cluster.name
    if found.reason == health.RENDERING_ONLY:
        return _("%(name)s (rendering-only example: its manifests can be previewed, nothing runs there)") % {
            "name": cluster.name
        }
    reason = Cluster.HealthReason(found.reason).label if found.reason in Cluster.HealthReason.values else ""
    if found.state == health.NOT_READY:
        return _("%(name)s (not ready: %(reason)s)") % {"name": cluster.name, "reason": reason}
    return _("%(name)s (unreachable: %(reason)s)") % {"name": cluster.name, "reason": reason}
