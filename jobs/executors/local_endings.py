"""How a local job ends: the Ended outcome, judging the workers' exits (judge, worker_failure), recording the
ending in state.json (record_ending), killing the sandbox or launcher that runs the workers (kill_pod), and
concluding a job whose runner died without a successor (conclude_unsupervised, called by LocalExecutor).
The supervisor loop that calls these is local_runner.py's. No Django here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from typing import TypeGuard

from clusters.local_procs import TICK, alive, kill_groups, live_groups, ours, reap, start_time
from jobs.executors.base import CANCELLED, FAILED, FINAL_PHASES, LOST, RUNNING, SUCCEEDED
from jobs.executors.local_jobdir import JobDir, read_json, spec_from_dict

LAUNCHER_SWEEP_SECONDS = 5


@dataclasses.dataclass(eq=False)
class Ended(Exception):
    phase: str
    reason: str
    message: str = ""
    exit_code: int | None = None


@dataclasses.dataclass(eq=False)
class Worker:
    rank: int
    code: int | None = None  # exit code once known (128 + N when killed by signal N)
    gone: bool = False  # ended without an exit code (killed with its sandbox)

    @property
    def done(self) -> bool:
        return self.code is not None or self.gone


def worker_failure(job: JobDir, worker: Worker) -> Ended:
    if worker.gone:
        what, exit_code = "ended without an exit code (it was killed)", None
    elif worker.code > 128:
        what, exit_code = f"was killed by signal {worker.code - 128}", worker.code
    else:
        what, exit_code = f"exited with code {worker.code}", worker.code
    tail = job.tail(worker.rank)
    message = f"worker {worker.rank} {what}" + (f"; last lines of its log:\n{tail}" if tail else "")
    return Ended(FAILED, "worker_failed", message, exit_code)


def judge(job: JobDir, workers: list[Worker], *, deadline_passed: bool = False) -> Ended | None:
    """How the job ends given its workers, or None while it goes on."""
    if job.cancel_file.exists():
        return Ended(CANCELLED, "cancelled", "cancelled on request")
    failed = [w for w in workers if w.done and w.code != 0]
    if failed:
        return worker_failure(job, min(failed, key=lambda w: w.rank))
    if all(w.done for w in workers):
        return Ended(SUCCEEDED, "", "", 0)
    if deadline_passed:
        return Ended(FAILED, "deadline_exceeded", "the job ran longer than its max_runtime_seconds and was stopped")
    return None


def record_ending(job: JobDir, ended: Ended) -> dict:
    return job.write_state(
        phase=ended.phase,
        reason=ended.reason,
        message=ended.message,
        exit_code=ended.exit_code,
        finished_at=time.time(),
    )


def is_pod_alive(pod: dict | None) -> TypeGuard[dict]:
    return pod is not None and bool(pod) and alive(pod["pid"], pod["starttime"])


def kill_pod(job: JobDir, pod: dict | None, *, grace: float, children=None) -> None:
    """End the job's workers: SIGTERM (the launcher passes it on), ``grace`` seconds, then the whole sandbox."""
    if not is_pod_alive(pod):
        _kill_leftover_groups(job)
        return
    if grace > 0:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pod["pid"], signal.SIGTERM)
        deadline = time.monotonic() + grace
        while is_pod_alive(pod) and time.monotonic() < deadline:
            reap(children)
            time.sleep(TICK)
    # SIGKILL of a PID namespace's init ends every process in it; without a sandbox the workers' groups too.
    _kill_leftover_groups(job)
    if (read_json(job.launch_file) or {}).get("isolation") == "none":
        # Unsandboxed, the launcher is the subreaper of what the workers left and kills it generation by
        # generation once they are done: let it finish before it goes (killing it first would orphan the rest).
        until = time.monotonic() + LAUNCHER_SWEEP_SECONDS
        while is_pod_alive(pod) and time.monotonic() < until:
            reap(children)
            time.sleep(TICK)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pod["pid"], signal.SIGKILL)
    until = time.monotonic() + 10
    while is_pod_alive(pod) and time.monotonic() < until:
        reap(children)
        time.sleep(TICK)


def _kill_leftover_groups(job: JobDir) -> None:
    launch = read_json(job.launch_file) or {}
    if launch.get("isolation") == "none":
        started = (job.groups().get("pod") or {}).get("started_at", 0)
        live = live_groups()
        groups = [{"pgid": pgid, "starttime": start_time(pgid)} for pgid in job.launcher_groups().values()]
        # A group whose leader started before the job cannot be one of its workers (a reused pgid).
        kill_groups([g for g in groups if ours(g, live) and (g["starttime"] or 0) >= started], grace=0)


def conclude_unsupervised(job: JobDir) -> dict | None:
    """For a job whose runner is dead (the caller holds runner.lock): end it, or None to adopt it.

    Adoptable: running, with its sandbox alive. Otherwise whatever is left is killed and the job ends from its
    exit files if every worker wrote one, as cancelled if that was asked, else as lost.
    """
    state = job.state()
    if state is None or state.get("phase") in FINAL_PHASES:
        return state
    recorded = job.groups()
    pod = recorded.get("pod")
    if state.get("phase") == RUNNING and is_pod_alive(pod):
        return None
    kill_groups(list(filter(None, [recorded.get("setup")])), grace=0)
    kill_pod(job, pod, grace=0)
    spec = spec_from_dict((read_json(job.launch_file) or {})["job"])
    workers = [Worker(rank, code=job.exit_code(rank)) for rank in range(spec.workers)]
    ended = None
    if job.cancel_file.exists():
        ended = Ended(CANCELLED, "cancelled", "cancelled on request")
    elif state.get("phase") == RUNNING and workers and all(w.code is not None for w in workers):
        ended = judge(job, workers)
    if ended is None:
        ended = Ended(LOST, "lost", "the job's supervisor died and its workers are gone; the job's outcome is unknown")
    return record_ending(job, ended)
