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

This package is the one face of it that callers import (`from tensorboards import services as boards`):
- services.reads: who may see which board, and the listings;
- services.lifecycle: starting, opening, observing, verifying and stopping a board;
- services.upkeep: the periodic care, stopping idle boards and reconciling the rest, and stopping this host's
  boards when the portal stops;
- services.runs: run discovery, what a board shows (its jobs' runs) and under which path;
- services.backend: which backend runs a board, and what its errors mean to a caller.
"""

from tensorboards.services.backend import board_backend
from tensorboards.services.lifecycle import (
    CLAIM_SECONDS,
    EXITED,
    FAILED,
    MAX_COMPARE,
    NOT_OURS,
    RUNNING,
    STARTING,
    STOPPED,
    TOUCH_SECONDS,
    VERIFY_SECONDS,
    board_ensure,
    board_observe,
    board_open,
    board_start_compare,
    board_start_for_job,
    board_stop,
    board_touch,
    board_verify,
)
from tensorboards.services.reads import board_get, board_job_ids, board_of_job, boards_for
from tensorboards.services.runs import board_url, job_wrote_events
from tensorboards.services.upkeep import boards_reconcile, boards_stop_idle, boards_stop_local

__all__ = [
    "CLAIM_SECONDS",
    "EXITED",
    "FAILED",
    "MAX_COMPARE",
    "NOT_OURS",
    "RUNNING",
    "STARTING",
    "STOPPED",
    "TOUCH_SECONDS",
    "VERIFY_SECONDS",
    "board_backend",
    "board_ensure",
    "board_get",
    "board_job_ids",
    "board_observe",
    "board_of_job",
    "board_open",
    "board_start_compare",
    "board_start_for_job",
    "board_stop",
    "board_touch",
    "board_url",
    "board_verify",
    "boards_for",
    "boards_reconcile",
    "boards_stop_idle",
    "boards_stop_local",
    "job_wrote_events",
]
