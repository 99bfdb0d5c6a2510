"""The executor interface (docs/architecture.md "Executors"): what the portal asks of a place that runs jobs.

Plain data in, plain data out; no Django. The local executor runs jobs as
process groups on this host, the Kubernetes executor as Kubeflow jobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from jobs.executors import log_reader


@dataclass(frozen=True)
class WorkerPlacement:
    worker: int  # rank, 0-based
    node: str
    gpus: tuple[int, ...] = ()  # GPU indices on the node; () for CPU-only workers
    gpu_fraction: float | None = None  # set for a shared GPU: this worker's share of gpus[0]


@dataclass(frozen=True)
class Placement:
    workers: tuple[WorkerPlacement, ...]


@dataclass(frozen=True)
class Mount:
    name: str  # storage name, e.g. "vision-datasets" -> PORTAL_DATA_VISION_DATASETS
    path: str  # where the job asked to see it, e.g. "/data"
    source: str  # local path (local storage) or PVC name (kubernetes)
    read_only: bool = False


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    name: str
    department: str
    code_url: str
    code_ref: str | None
    command: str
    framework: str  # python | pytorch | tensorflow | jax
    image: str  # container image reference (kubernetes); informative on the local executor
    base_packages: tuple[str, ...] = ()  # what the image provides; the local executor pip-installs them
    requirements: tuple[str, ...] = ()  # the job's extra PEP 508 requirements
    workers: int = 1
    gpus_per_worker: float = 0
    mounts: tuple[Mount, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    max_runtime_seconds: int | None = None
    grace_seconds: int = 30
    gpu_type: str = ""  # the pool's GPU type (kubernetes: the node selector); "" for CPU-only
    priority: str = ""  # portal priority class name (kubernetes: the PriorityClass); "" for the cluster default
    tensorboard: bool = True  # whether a board will read TENSORBOARD_LOG_DIR (kubernetes: on the job volume)
    commit: str | None = None  # the commit an earlier run resolved (after a preemption): wins over code_ref
    job_key: str = ""  # the portal job this run belongs to (its id): names the checkpoint folder kept across runs
    run_index: int = 0  # 0 for the first run, 1 after the first preemption ... (PORTAL_RUN_INDEX)
    setup_timeout_seconds: int = 1800  # clone + environment build; past it the job fails as setup_timeout


# Phases an executor reports. "starting" covers fetching code and installing
# requirements; the three endings and "lost" are final.
STARTING, RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST = (
    "starting",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "lost",
)
FINAL_PHASES = frozenset({SUCCEEDED, FAILED, CANCELLED, LOST})


@dataclass(frozen=True)
class ObservedState:
    phase: str  # one of the phases above
    reason: str = (
        ""  # machine-readable: clone_failed, install_failed, worker_failed, deadline_exceeded, cancelled, lost ...
    )
    message: str = ""  # for a person: what happened, with the last lines of output on failure
    exit_code: int | None = None
    commit: str | None = None  # resolved commit SHA of the code, once fetched
    started_at: float | None = None  # epoch seconds when the user command started
    finished_at: float | None = None
    checkpoint_at: float | None = None  # epoch seconds of PORTAL_CHECKPOINT_DIR/.portal-checkpoint, if the job wrote it


class Executor(Protocol):
    def launch(self, job: JobSpec, placement: Placement) -> None:
        """Start the job. Idempotent: launching a job that was already launched does nothing."""

    def poll(self, job_ids: list[str]) -> dict[str, ObservedState]:
        """The current state of each job (batched). Unknown ids are left out."""

    def cancel(self, job_id: str, grace_seconds: int) -> None:
        """SIGTERM every worker, wait ``grace_seconds``, then SIGKILL. Returns without waiting."""

    def logs(self, job_id: str, worker: int, since: int = 0) -> Iterator[str]:
        """Complete lines of one worker's log from byte offset ``since``, each with its newline."""

    def read_log(
        self,
        job_id: str,
        worker: int,
        *,
        cursor: log_reader.Cursor | None = None,
        tail: int | None = None,
        line_max: int = log_reader.LINE_MAX_BYTES,
    ) -> log_reader.LogRead:
        """One read of bounded cost (log_reader): the last ``tail`` lines, or the lines after ``cursor``; a line
        longer than ``line_max`` bytes is cut and marked. The returned cursor is where a follower goes on."""
