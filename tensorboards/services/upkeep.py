"""The periodic care of boards (tensorboards.tasks): stopping idle ones and reconciling the rest.

Owns stopping every board nobody visited for PORTAL_TENSORBOARD_IDLE_SECONDS, and bringing the starting and
running ones up to date with their processes: noticing dead or ready ones, stopping one whose port another
process serves (board_verify), and showing jobs' new runs. And stopping every board that runs on this host when
the portal stops (boards_stop_local, `make run`'s Ctrl-C).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from clusters.models import Cluster
from tensorboards.models import TensorBoard
from tensorboards.services.backend import _call, _cluster_of, board_backend
from tensorboards.services.lifecycle import RUNNING, STARTING, STOPPED, board_observe, board_stop, board_verify
from tensorboards.services.runs import _spec


def boards_stop_idle(*, now: datetime | None = None) -> int:
    """Stop every board nobody visited for PORTAL_TENSORBOARD_IDLE_SECONDS. Returns how many were stopped."""
    now = now or timezone.now()
    idle_seconds = settings.PORTAL_TENSORBOARD_IDLE_SECONDS
    idle = TensorBoard.objects.filter(
        status__in=[STARTING, RUNNING], last_access_at__lt=now - timedelta(seconds=idle_seconds)
    )
    stopped = 0
    for board in idle:
        board_stop(board=board, message=f"Stopped after {idle_seconds} s without a visit; it starts again when opened.")
        stopped += board.status == STOPPED
    return stopped


def boards_reconcile(*, now: datetime | None = None) -> int:
    """Periodic care: stop idle boards, notice dead or ready ones, show jobs' new runs. Returns how many were stopped."""
    stopped = boards_stop_idle(now=now)
    for board in TensorBoard.objects.filter(status__in=[STARTING, RUNNING]):
        board = board_observe(board=board, now=now)
        if board.status == RUNNING and board_verify(board=board):
            _call(lambda board=board: board_backend(board).sync_runs(_spec(board)))
    return stopped


def boards_stop_local(*, message: str = "Stopped with the portal; it starts again when opened.") -> int:
    """Stop every starting or running board whose process runs on this host (the portal is stopping: its
    processes are detached and would outlive it). Boards on a Kubernetes cluster are not this host's and are
    left to their idle timeout. Returns how many were stopped."""
    stopped = 0
    for board in TensorBoard.objects.filter(status__in=[STARTING, RUNNING]).order_by("pk"):
        cluster = _cluster_of(board)
        if cluster is not None and cluster.backend == Cluster.Backend.KUBERNETES:
            continue
        board = board_stop(board=board, message=message)
        stopped += board.status == STOPPED
    return stopped
