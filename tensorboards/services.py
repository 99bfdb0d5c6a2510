"""TensorBoards on demand (docs/architecture.md "TensorBoard"): one per job, or one comparing several jobs' runs.

Owns the TensorBoard rows (tensorboards.models.TensorBoard) and their rules: who may open a board (every job
of it must be visible to the user), starting one (idempotent: the board of the same job set is
reused, and started again when it is not running), noticing that its process became ready or died,
recording visits, and stopping boards nobody visited for PORTAL_TENSORBOARD_IDLE_SECONDS.
It also sees to it that a local board's port is served by the process it started (board_verify): a job
that killed a board and bound its port must never have its pages proxied to a department on the portal's
origin, so such a board is stopped and started afresh on another port.

Processes are the backend's (BoardBackend in tensorboards/backends.py, like the executors), chosen by
the jobs' cluster: the local backend runs a real `tensorboard` on this host that serves a folder of links
to the jobs' event folders; the Kubernetes backend (tensorboards/backends_k8s.py) runs a Deployment +
Service in the department's namespace reading the jobs' subPaths of its job volume. The backend part
imports nothing from Django.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from clusters.errors import ExecutorError
from clusters.models import Cluster
from clusters.services import cluster_settings, kube_for
from core.errors import Conflict, InvalidInput
from jobs import selectors
from jobs.executors.local_jobdir import JobDir
from jobs.models import Job
from jobs.services import executor_for
from tensorboards.backends import BoardBackend, BoardError, BoardProcess, BoardSpec, LocalBoardBackend
from tensorboards.backends_k8s import DEFAULT_IMAGE, KubeBoardSpec, KubernetesBoardBackend, job_run
from tensorboards.models import TensorBoard

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


def board_backend(board: TensorBoard | None = None) -> BoardBackend:
    """The backend of the board's jobs' cluster (they share one: board_start_compare sees to it)."""
    cluster = _cluster_of(board) if board is not None else None
    if cluster is None or cluster.backend != Cluster.Backend.KUBERNETES:
        # A trusted cluster (isolation: none) runs its boards as plain processes, like its jobs.
        trusted = cluster is not None and cluster.settings.get("isolation") == "none"
        return LocalBoardBackend(settings.PORTAL_DATA_ROOT / "tensorboard", sandboxed=False if trusted else None)
    try:
        return KubernetesBoardBackend(
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


# --- Reads ----------------------------------------------------------------------------


def board_url(board: TensorBoard) -> str:
    if board.is_compare:
        return f"/tensorboard/compare/{board.pk}/"
    return f"/tensorboard/{board.key.removeprefix('job:')}/"


def board_job_ids(board: TensorBoard) -> list[int]:
    return sorted(board.jobs.values_list("pk", flat=True))


def board_of_job(*, job: Job) -> TensorBoard | None:
    return TensorBoard.objects.filter(key=f"job:{job.pk}").first()


def board_get(*, user, board_id: int) -> TensorBoard | None:
    """A comparison board if the user may see every job of it; None otherwise (answered as 404 alike)."""
    board = TensorBoard.objects.filter(pk=board_id, key__startswith="compare:").first()
    if board is None:
        return None
    ids = board_job_ids(board)
    visible = selectors.jobs_for(user=user).filter(pk__in=ids).count()
    return board if ids and visible == len(ids) else None


def boards_for(*, user) -> list[TensorBoard]:
    """Boards all of whose jobs the user may see, newest first."""
    visible = selectors.jobs_for(user=user).values("pk")
    hidden = TensorBoard.jobs.through.objects.exclude(job_id__in=visible).values("tensorboard_id")
    return list(
        TensorBoard.objects.filter(jobs__in=visible).exclude(pk__in=hidden).distinct().order_by("-started_at", "-pk")
    )


# --- Starting ---------------------------------------------------------------------------


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
        board = board_get(user=user, board_id=board_id)
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


# --- Stopping ----------------------------------------------------------------------------


def board_stop(*, board: TensorBoard, message: str = "Stopped.") -> TensorBoard:
    process = _process(board)
    if not _settle(board, to=STOPPED, message=message):
        return board  # someone else stopped or restarted it meanwhile
    if process is not None:
        _call(lambda: board_backend(board).stop(process))
    return board


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


def _owns(backend: BoardBackend, process: BoardProcess) -> bool:
    # A Kubernetes board is a pod behind a Service in the department's namespace, not a port on this host.
    return not isinstance(backend, LocalBoardBackend) or backend.owns(process)


def _disown(board: TensorBoard, backend: BoardBackend, process: BoardProcess, *, message: str) -> None:
    """Stop the board whose port is not its own; it starts again, on a new port, when next opened."""
    _verified.pop(board.pk, None)
    if _settle(board, to=STOPPED, message=message):
        # Only our own process is signalled (its pid and start time are checked), never the one on the port.
        _call(lambda: backend.stop(process))


def _identity(board: TensorBoard) -> tuple:
    return board.pid, board.handle, board.host, board.port


def _process(board: TensorBoard) -> BoardProcess | None:
    if board.port is None:
        return None
    return BoardProcess(host=board.host, port=board.port, pid=board.pid, handle=board.handle)


def _spec(board: TensorBoard) -> BoardSpec:
    runs = []
    jobs = list(board.jobs.select_related("cluster", "department").order_by("pk"))
    if jobs and jobs[0].cluster.backend == Cluster.Backend.KUBERNETES:
        # Event files are on the department's job volume under each run's subPath (jobs/executors/manifests.py).
        # Only the current run is known there: earlier runs of a re-queued job are not listed.
        runs = [job_run(f"{_run_name(job)}-{job.pk}", job.storage_key) for job in jobs]
        return KubeBoardSpec(
            board_id=board.pk,
            path_prefix=board_url(board).rstrip("/"),
            runs=tuple(runs),
            department=jobs[0].department.slug,
        )
    for job in jobs:
        runs.extend(_runs_of(job))
    return BoardSpec(board_id=board.pk, path_prefix=board_url(board).rstrip("/"), runs=tuple(runs))


def _runs_of(job: Job) -> list[tuple[str, str]]:
    """(run name, event folder) of the job's runs on the local executor, every run of a re-queued job included.

    Today's layout keeps one folder per job, <root>/tensorboard/<job id>/run-<PORTAL_RUN_INDEX>/ (local_jobdir.py):
    it is shown as one entry, so TensorBoard lists its runs as "<name>-<id>/run-0", "<name>-<id>/run-1" ... and a
    new run appears without touching the board. Jobs that ran before it have one folder per admission,
    <root>/jobs/<run id>/tensorboard/, each shown as "<name>-<run id>".
    """
    try:
        executor = executor_for(job.cluster)
    except ExecutorError as exc:
        raise Conflict(f"TensorBoard is not available for job {job.pk}: {exc.message}") from exc
    root = Path(executor.root)
    jobs_root = root / "jobs"
    run_ids = {
        path.name
        for path in jobs_root.glob(f"{job.pk}-*")
        if re.fullmatch(rf"{job.pk}-[0-9a-f]+", path.name)
        and JobDir(path).tensorboard.is_dir()
        and JobDir(path).belongs_to(job.storage_key)
    }
    runs = [(f"{_run_name(job)}-{run_id}", str(JobDir(jobs_root / run_id).tensorboard)) for run_id in sorted(run_ids)]
    return [*runs, (f"{_run_name(job)}-{job.pk}", str(root / "tensorboard" / job.storage_key))]


def _run_name(job: Job) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", job.name)[:40] or "job"


def _call(operation):
    try:
        return operation()
    except BoardError as exc:
        if exc.permanent:
            raise Conflict(exc.message) from exc
        return None  # transient: the next visit or the periodic task tries again


def _ids(ids: list[int]) -> str:
    return ("id " if len(ids) == 1 else "ids ") + ", ".join(map(str, ids))
