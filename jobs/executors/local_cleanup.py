"""Cleaning up after local jobs (no Django): a finished job's folders past their retention, and job environments
nobody used for a while. Called by the portal's periodic clean-up (jobs/retention.py) through LocalExecutor.

A finished job's folders are its runs' directories (<root>/jobs/<id>-*/, those launch.json says are the job's:
its log, output, code, state) and the folders kept across its runs (<root>/checkpoints/<job_key>/,
<root>/tensorboard/<job_key>/). A run whose runner is alive, or whose state is not final, is never touched.
Models registered from a job were copied into the artifact store when they were registered, and stay.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path

from jobs.executors import venvs
from jobs.executors.base import FINAL_PHASES
from jobs.executors.local_jobdir import JobDir


def remove_job_files(root: Path, *, job_id: int, job_key: str) -> list[str]:
    """Delete the folders of the finished job ``job_id`` (whose key is ``job_key``); the paths deleted."""
    removed = []
    for folder in sorted((root / "jobs").glob(f"{job_id}-*")):
        run = JobDir(folder)
        if not run.belongs_to(job_key) or (run.state() or {}).get("phase") not in FINAL_PHASES:
            continue
        try:
            fd = os.open(run.lock_file, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = None
        try:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its runner is still alive
            doomed = folder.with_name(f".removed-{folder.name}")
            os.rename(folder, doomed)
        finally:
            if fd is not None:
                os.close(fd)
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(str(folder))
    for kept in (root / "checkpoints" / job_key, root / "tensorboard" / job_key):
        if kept.is_dir() and not kept.is_symlink():
            shutil.rmtree(kept, ignore_errors=True)
            removed.append(str(kept))
    return removed


def envs_in_use(root: Path) -> set[str]:
    """The envs of the runs that have not ended (the runner records each run's env in its state)."""
    used = set()
    for folder in (root / "jobs").iterdir() if (root / "jobs").is_dir() else []:
        state = JobDir(folder).state() or {}
        if state.get("phase") not in FINAL_PHASES and state.get("env"):
            used.add(str(state["env"]))
    return used


def evict_unused(root: Path, *, unused_seconds: float, in_use: set[str], now: float | None = None) -> list[str]:
    """Delete the envs under ``root`` (<root>/<department>/<key>) whose last use (their completion marker's
    mtime, refreshed at each reuse) is older than ``unused_seconds`` and that no unfinished job uses
    (``in_use``: env paths). An env being built or reused meanwhile holds its key's lock and is left alone.
    The paths deleted."""
    now = time.time() if now is None else now
    removed = []
    for department in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        for env in sorted(p for p in department.iterdir() if (p / venvs.COMPLETE).is_file()):
            if str(env) in in_use or now - (env / venvs.COMPLETE).stat().st_mtime < unused_seconds:
                continue
            with open(department / f"{env.name}.lock", "a") as lock:
                try:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a job is building or reusing it right now
                if now - (env / venvs.COMPLETE).stat().st_mtime < unused_seconds:
                    continue
                doomed = department / f".evict-{env.name}-{os.getpid()}"
                os.rename(env, doomed)  # no job finds it complete from here on
            shutil.rmtree(doomed, ignore_errors=True)
            removed.append(str(env))
    return removed
