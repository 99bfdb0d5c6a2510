"""What a board shows and where (run discovery): its URL path and the runs of its jobs.

Owns board_url (the proxy's path of a board, also its TensorBoard --path_prefix) and the BoardSpec a backend
starts a board from: on the local executor every run of each job, found in the jobs' folders on this host; on
a Kubernetes cluster each job's current run, as a subPath of the department's job volume.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from clusters.errors import ExecutorError
from clusters.models import Cluster
from core.errors import Conflict
from jobs.executors.local_jobdir import JobDir
from jobs.models import Job
from jobs.running import executor_for
from tensorboards.backends import BoardSpec
from tensorboards.backends_k8s import KubeBoardSpec, job_run
from tensorboards.models import TensorBoard


def board_url(board: TensorBoard) -> str:
    if board.is_compare:
        return f"/tensorboard/compare/{board.pk}/"
    return f"/tensorboard/{board.key.removeprefix('job:')}/"


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
    root = Path(executor.root)  # type: ignore[attr-defined]  # the local executor's; not called for Kubernetes
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


EVENTS_SCAN_LIMIT = 5000  # entries looked at before giving up: a job's folders are its own, and may be huge


def job_wrote_events(job: Job) -> bool | None:
    """Has the job written TensorBoard event files (``*tfevents*``) yet? None when the portal cannot tell
    (a Kubernetes cluster keeps them on its own volume), False when its folders cannot be read."""
    if job.cluster.backend == Cluster.Backend.KUBERNETES:
        return None
    try:
        folders = [Path(folder) for _name, folder in _runs_of(job)]
    except Conflict:
        return False
    seen = 0
    for folder in folders:
        if folder.is_symlink() or not folder.is_dir():
            continue
        for _directory, _subdirs, files in os.walk(folder):  # links are not followed
            if any("tfevents" in name for name in files):
                return True
            seen += len(files) + len(_subdirs)
            if seen > EVENTS_SCAN_LIMIT:
                return False
    return False


def _run_name(job: Job) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", job.name)[:40] or "job"
