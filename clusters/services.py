"""A cluster's settings as the Kubernetes code reads them, its one cached client (``kube_for``: one ``Kube`` per
cluster, rebuilt when its settings change, shared by jobs, boards, builds and model servers), and calling it
(``executor_call``: a transient failure becomes a Celery retry)."""

from __future__ import annotations

import json

from clusters.errors import ExecutorError
from clusters.k8s import ClusterSettings, ManifestError
from clusters.models import Cluster
from core.celery import TransientError

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
