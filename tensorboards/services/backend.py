"""Which backend runs a board, and how the portal talks to it (docs/architecture.md "TensorBoard").

Owns the choice of BoardBackend by the board's jobs' cluster (the local one runs a real `tensorboard` on this
host, the Kubernetes one a Deployment + Service in the department's namespace), the BoardProcess a row
records, whether a process is the one the portal started, and what a backend's error means to a caller
(_call: a permanent one is a Conflict, a transient one is tried again by the next visit or the periodic task).
"""

from __future__ import annotations

from django.conf import settings

from clusters.errors import ExecutorError
from clusters.models import Cluster
from clusters.services import cluster_settings, kube_for
from core.errors import Conflict
from tensorboards.backends import BoardBackend, BoardError, BoardProcess, LocalBoardBackend
from tensorboards.backends_k8s import DEFAULT_IMAGE, KubernetesBoardBackend
from tensorboards.models import TensorBoard


def board_backend(board: TensorBoard | None = None) -> BoardBackend:
    """The backend of the board's jobs' cluster (they share one: board_start_compare sees to it)."""
    cluster = _cluster_of(board) if board is not None else None
    if cluster is None or cluster.backend != Cluster.Backend.KUBERNETES:
        # A trusted cluster (isolation: none) runs its boards as plain processes, like its jobs.
        trusted = cluster is not None and cluster.settings.get("isolation") == "none"
        return LocalBoardBackend(settings.PORTAL_DATA_ROOT / "tensorboard", sandboxed=False if trusted else None)
    try:
        # Its start and sync_runs take the KubeBoardSpec that runs._spec builds for a Kubernetes cluster's boards.
        return KubernetesBoardBackend(  # type: ignore[return-value]
            kube_for(cluster),
            cluster_settings(cluster),
            image=cluster.settings.get("tensorboard_image") or DEFAULT_IMAGE,
            cluster_domain=cluster.settings.get("cluster_domain") or "cluster.local",
        )
    except ExecutorError as exc:
        raise BoardError(exc.message, permanent=exc.permanent) from exc


def _cluster_of(board: TensorBoard) -> Cluster | None:
    job = board.jobs.select_related("cluster").order_by("pk").first()
    return job.cluster if job is not None else None


def _owns(backend: BoardBackend, process: BoardProcess) -> bool:
    # A Kubernetes board is a pod behind a Service in the department's namespace, not a port on this host.
    return not isinstance(backend, LocalBoardBackend) or backend.owns(process)


def _identity(board: TensorBoard) -> tuple:
    return board.pid, board.handle, board.host, board.port


def _process(board: TensorBoard) -> BoardProcess | None:
    if board.port is None:
        return None
    return BoardProcess(host=board.host, port=board.port, pid=board.pid, handle=board.handle)


def _call(operation):
    try:
        return operation()
    except BoardError as exc:
        if exc.permanent:
            raise Conflict(exc.message) from exc
        return None  # transient: the next visit or the periodic task tries again
