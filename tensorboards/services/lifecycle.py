"""Starting, opening, observing and stopping boards: the life of a TensorBoard row and its process.

Owns starting a board (idempotent: the board of the same job set is reused, and started again when it is not
running; a conditional update claims it, so two requests never start two processes), opening it for the proxy
and recording visits, noticing that its process became ready or died (board_observe), and seeing to it that a
local board's port is served by the process it started (board_verify): a job that killed a board and bound its
port must never have its pages proxied to a department on the portal's origin, so such a board is stopped and
started afresh on another port.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from clusters.models import Cluster
from core.errors import Conflict, InvalidInput
from jobs import selectors
from jobs.models import Job
from tensorboards.backends import BoardBackend, BoardError, BoardProcess, LocalBoardBackend
from tensorboards.models import TensorBoard
from tensorboards.services.backend import _call, _identity, _owns, _process, board_backend
from tensorboards.services.reads import board_get, board_of_job
from tensorboards.services.runs import _spec

MAX_COMPARE = 10
# A visit is written down at most this often: TensorBoard's UI sends many requests a minute.
TOUCH_SECONDS = 30
# A board whose starter vanished between claiming it and recording the process is started again after this.
CLAIM_SECONDS = 60
# A running board's listener is looked at fully (/proc/net/tcp and its process's fds, a few ms) at most this
# often per board; in between, only whether its process still lives, which costs one read of /proc.
VERIFY_SECONDS = 3
EXITED = "TensorBoard exited; it starts again when opened."
NOT_OURS = "This board's process is not the one the portal started; it was stopped and will be started again."

STARTING, RUNNING, STOPPED, FAILED = (
    TensorBoard.Status.STARTING,
    TensorBoard.Status.RUNNING,
    TensorBoard.Status.STOPPED,
    TensorBoard.Status.FAILED,
)


def board_start_for_job(*, user, job: Job, restart_failed: bool = True, now: datetime | None = None) -> TensorBoard:
    """The job's board, started if it is not running. Idempotent."""
    if not job.tensorboard:
        raise Conflict(
            f"Job {job.pk} was submitted with tensorboard=false, so it has no TensorBoard. "
            "Clone it with tensorboard=true to get one."
        )
    board = _board_for_key(key=f"job:{job.pk}", jobs=[job], user=user)
    return board_ensure(board=board, user=user, restart_failed=restart_failed, now=now)


def board_start_compare(*, user, job_ids: list[int], now: datetime | None = None) -> TensorBoard:
    """One board showing the runs of several jobs side by side. Idempotent for the same set of jobs."""
    ids = sorted(set(job_ids))
    if len(ids) < 2:
        raise InvalidInput({"jobs": ["Give at least two job ids to compare; a single job has its own board."]})
    if len(ids) > MAX_COMPARE:
        raise InvalidInput({"jobs": [f"Compare at most {MAX_COMPARE} jobs at once; {len(ids)} were given."]})
    jobs = list(selectors.jobs_for(user=user).filter(pk__in=ids).order_by("pk"))
    missing = sorted(set(ids) - {job.pk for job in jobs})
    if missing:
        raise InvalidInput({"jobs": [f"No job with {_ids(missing)} in your departments."]})
    without = [job.pk for job in jobs if not job.tensorboard]
    if without:
        raise Conflict(f"The job with {_ids(without)} was submitted with tensorboard=false and cannot be compared.")
    places = {(job.cluster_id, job.department_id) for job in jobs}
    if any(job.cluster.backend == Cluster.Backend.KUBERNETES for job in jobs) and len(places) > 1:
        # One pod reads them all, and a pod mounts only its own namespace's job volume.
        raise Conflict(
            "Jobs on a Kubernetes cluster can be compared only with jobs of the same department on the same cluster."
        )
    board = _board_for_key(key="compare:" + ",".join(map(str, ids)), jobs=jobs, user=user)
    return board_ensure(board=board, user=user, restart_failed=True, now=now)


def board_open(
    *, user, job_id: int | None = None, board_id: int | None = None, now: datetime | None = None
) -> TensorBoard | None:
    """The board behind a proxy request, started if it is not running and its visit recorded.

    None when the user may not see it. A board that failed to start is left failed (its message
    says why) rather than started on every request of the page; the API starts it again. A running
    board whose port another process serves comes back stopped, with NOT_OURS as its message.
    """
    if job_id is not None:
        job = selectors.job_get(user=user, job_id=job_id)
        if job is None:
            return None
        board = board_of_job(job=job)
        if board is None or board.status != RUNNING:
            board = board_start_for_job(user=user, job=job, restart_failed=False, now=now)
    else:
        board = board_get(user=user, board_id=board_id)  # type: ignore[arg-type]  # given when job_id is not
        if board is None:
            return None
        if board.status != RUNNING:
            board = board_ensure(board=board, user=user, restart_failed=False, now=now)
    if board.status == RUNNING and not board_verify(board=board) and board.message != NOT_OURS:
        board = board_ensure(board=board, user=user, restart_failed=False, now=now)  # it exited: start it again now
    if board.status == RUNNING:
        board_touch(board=board, now=now)
    return board


def board_ensure(*, board: TensorBoard, user=None, restart_failed: bool, now: datetime | None = None) -> TensorBoard:
    """Make sure the board's process runs: look at it, and start it (again) if it does not."""
    board = board_observe(board=board, now=now)
    if board.status == RUNNING:
        _call(lambda: board_backend(board).sync_runs(_spec(board)))
        return board
    if board.status == STARTING or (board.status == FAILED and not restart_failed):
        return board
    return _start(board, user=user, now=now or timezone.now())


def board_observe(*, board: TensorBoard, now: datetime | None = None) -> TensorBoard:
    """Bring the row up to date with its process: answers -> running; gone -> stopped, or failed if it never came up."""
    if board.status not in (STARTING, RUNNING):
        return board
    now = now or timezone.now()
    process = _process(board)
    if process is None:
        if board.started_at and (now - board.started_at).total_seconds() > CLAIM_SECONDS:
            _settle(board, to=FAILED, message="TensorBoard did not start in time.")
        return board
    try:
        backend = board_backend(board)
        if backend.alive(process):
            if board.status == STARTING and backend.ready(process):
                if _owns(backend, process):
                    _settle(board, to=RUNNING, message="")
                    _verified[board.pk] = (_identity(board), time.monotonic(), backend)
                else:
                    _disown(board, backend, process, message=NOT_OURS)
            return board
    except BoardError as exc:
        if exc.permanent:
            _settle(board, to=FAILED, message=exc.message)
        return board  # transient (the cluster did not answer): look again next time
    if board.status == STARTING:
        output = backend.output(board.pk)
        _settle(board, to=FAILED, message="TensorBoard exited while starting." + (f"\n{output}" if output else ""))
    else:
        _settle(board, to=STOPPED, message=EXITED)
    return board


_verified: dict[
    int, tuple[tuple, float, BoardBackend]
] = {}  # board id -> (process, when, backend) of its last full look


def board_verify(*, board: TensorBoard) -> bool:
    """Is the running board still served by the process the portal started (every listener on its port)?

    Looked at fully at most every VERIFY_SECONDS per board; in between only whether its process lives
    (a port can be taken only once its process is gone). A board that is not ours any more is stopped and
    says why: NOT_OURS when another process answers on its port (it starts afresh, on another port, on the
    next visit), EXITED when nothing does.
    """
    process = _process(board)
    if board.status != RUNNING or process is None:
        return False
    seen = _verified.get(board.pk)
    clock = time.monotonic()
    if seen is not None and seen[0] == _identity(board) and clock - seen[1] < VERIFY_SECONDS:
        if not isinstance(seen[2], LocalBoardBackend) or seen[2].alive(process):
            return True
    try:
        backend = board_backend(board)
    except BoardError:
        return True  # a Kubernetes board whose cluster does not answer: its pod is not in reach of jobs here
    if _owns(backend, process):
        _verified[board.pk] = (_identity(board), clock, backend)
        return True
    exited = not backend.alive(process) and not backend.ready(process)
    _disown(board, backend, process, message=EXITED if exited else NOT_OURS)
    return False


def board_touch(*, board: TensorBoard, now: datetime | None = None) -> None:
    now = now or timezone.now()
    stale = now - timedelta(seconds=TOUCH_SECONDS)
    if board.last_access_at and board.last_access_at > stale:
        return
    TensorBoard.objects.filter(Q(last_access_at__lte=stale) | Q(last_access_at__isnull=True), pk=board.pk).update(
        last_access_at=now
    )
    board.last_access_at = now


def board_stop(*, board: TensorBoard, message: str = "Stopped.") -> TensorBoard:
    process = _process(board)
    if not _settle(board, to=STOPPED, message=message):
        return board  # someone else stopped or restarted it meanwhile
    if process is not None:
        _call(lambda: board_backend(board).stop(process))
    return board


# --- Helpers -------------------------------------------------------------------------------


def _board_for_key(*, key: str, jobs: list[Job], user) -> TensorBoard:
    board = TensorBoard.objects.filter(key=key).first()
    if board is not None:
        return board
    try:
        with transaction.atomic():
            board = TensorBoard.objects.create(key=key, department=jobs[0].department, started_by=user)
            board.jobs.set(jobs)
    except IntegrityError:  # a concurrent request created it first
        board = TensorBoard.objects.get(key=key)
    return board


def _start(board: TensorBoard, *, user, now: datetime) -> TensorBoard:
    spec = _spec(board)
    # Claimed with a conditional update, so that two requests never start two processes for one board.
    claimed = TensorBoard.objects.filter(pk=board.pk, status=board.status, pid=board.pid).update(
        status=STARTING,
        host="",
        port=None,
        pid=None,
        handle="",
        started_at=now,
        last_access_at=now,
        message="Starting TensorBoard.",
        started_by=user or board.started_by,
    )
    if claimed:
        try:
            process = board_backend(board).start(spec)
        except BoardError as exc:
            TensorBoard.objects.filter(pk=board.pk).update(status=FAILED, message=exc.message)
        else:
            TensorBoard.objects.filter(pk=board.pk).update(
                host=process.host, port=process.port, pid=process.pid, handle=process.handle
            )
    board.refresh_from_db()
    return board


def _settle(board: TensorBoard, *, to: str, message: str) -> bool:
    """Move the board to ``to`` unless it changed meanwhile (another process, another status)."""
    changed = TensorBoard.objects.filter(pk=board.pk, status=board.status, pid=board.pid).update(
        status=to, message=message
    )
    board.refresh_from_db()
    return bool(changed)


def _disown(board: TensorBoard, backend: BoardBackend, process: BoardProcess, *, message: str) -> None:
    """Stop the board whose port is not its own; it starts again, on a new port, when next opened."""
    _verified.pop(board.pk, None)
    if _settle(board, to=STOPPED, message=message):
        # Only our own process is signalled (its pid and start time are checked), never the one on the port.
        _call(lambda: backend.stop(process))


def _ids(ids: list[int]) -> str:
    return ("id " if len(ids) == 1 else "ids ") + ", ".join(map(str, ids))
