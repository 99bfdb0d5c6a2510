"""The local executor: jobs as process groups on this host (docs/architecture.md "Executors").

Owns the executor side of a local job: checking that a job can run here, writing its launch file,
starting its supervisor (local_runner, detached, so it outlives the caller), reading its state and
logs, asking it to cancel, and re-adopting or ending jobs whose supervisor died. Everything that
happens to a running job happens in the runner.

Data folder: <root>/jobs/<run_id>/ (layout in local_jobdir.JobDir), <root>/checkpoints/<job_key>/ and
<root>/tensorboard/<job_key>/ (kept across a job's runs), <root>/envs/ (venvs.py), and <root>/uids.json: the uid
each department's jobs run as (``uid_base`` + 1, + 2 ... in the order departments first ran; ``uid_base`` itself
is never given). One uid per department rather than per job: a department's jobs share its storage, and files
one job leaves there must stay usable by the next; departments never share a uid, so never a file.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from clusters import sandbox
from clusters.errors import ExecutorError
from core.code_url import code_url_problem, is_local_code, local_path
from jobs.executors import local_cleanup, log_reader
from jobs.executors.base import FINAL_PHASES, STARTING, JobSpec, ObservedState, Placement
from jobs.executors.local_endings import conclude_unsupervised
from jobs.executors.local_jobdir import JobDir, checkpoint_at, read_json, write_json

# The runner runs as `python -m jobs.executors.local_runner` from the checkout that holds this file.
_SOURCE_ROOT = Path(__file__).resolve().parents[2]
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Where a mount cannot go in a sandbox: the system and the job's own folders.
RESERVED_PATHS = ("/portal", "/usr", "/etc", "/proc", "/dev", "/sys", "/bin", "/sbin", "/lib", "/lib64", "/tmp")
_STATE_FIELDS = [f.name for f in dataclasses.fields(ObservedState)]


def _inside(path: str, folders: tuple[str, ...]) -> bool:
    return any(path == folder or path.startswith(folder.rstrip(os.sep) + os.sep) for folder in folders)


def base_python() -> str:
    """The interpreter job environments are built on: the portal's venv is not visible in a sandbox."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def free_ports(count: int) -> list[int]:
    # All bound at once so that the ports differ; released just before the workers bind them.
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class LocalExecutor:
    def __init__(
        self,
        root: Path,
        *,
        python: str | None = None,
        allow_local_code: bool = True,
        master_addr: str = "127.0.0.1",
        isolation: str = "sandbox",
        uid_base: int = 200000,
        protected_paths: tuple[str, ...] = (),
        allowed_indexes: tuple[str, ...] = (),
        extra_ro_paths: tuple[str, ...] = (),
        shared_code: tuple[str, ...] = (),
        shared_storage: tuple[str, ...] = (),
        log_max_bytes: int | None = None,
        disk_max_bytes: int | None = None,
    ):
        self.root = Path(root)
        self.python = python or base_python()  # job virtualenvs are built on it
        self.allow_local_code = allow_local_code
        self.master_addr = master_addr
        self.isolation = isolation  # "sandbox" | "none" (a trusted single-user machine)
        self.uid_base = uid_base
        # Code is never cloned from these (the portal's data root and checkout: other jobs' code lives there).
        self.protected_paths = tuple(os.path.realpath(p) for p in (self.root, _SOURCE_ROOT, *protected_paths))
        self.shared_code = tuple(os.path.realpath(p) for p in shared_code)  # inside those, but published for jobs
        self.shared_storage = tuple(os.path.realpath(p) for p in shared_storage)  # the same, for storage volumes
        self.allowed_indexes = allowed_indexes
        self.extra_ro_paths = extra_ro_paths  # more host folders jobs see read-only (e.g. /opt/conda)
        self.log_max_bytes = log_max_bytes  # a worker's log stops growing here (sandbox_init.Relay)
        self.disk_max_bytes = disk_max_bytes  # a job whose folders hold more fails (local_disk.DiskWatch)

    # -- the Executor protocol

    def launch(self, job: JobSpec, placement: Placement) -> None:
        self._check(job, placement)
        jobdir = self._jobdir(job.job_id)
        try:
            jobdir.path.mkdir(parents=True, exist_ok=True)
            lock = self._lock(jobdir)
        except OSError as exc:
            raise ExecutorError(f"cannot prepare the job directory {jobdir.path}: {exc}", permanent=False) from exc
        if lock is None:
            return  # its runner is alive: launched already
        try:
            if jobdir.state_file.exists():
                return  # launched before; poll() looks after it if its runner is gone
            master_port, *tf_ports = free_ports(1 + (job.workers if job.framework == "tensorflow" else 0))
            uid = self._uid(job.department) if self.isolation == "sandbox" and os.geteuid() == 0 else None
            write_json(
                jobdir.launch_file,
                {
                    "job": dataclasses.asdict(job),
                    "placement": dataclasses.asdict(placement),
                    "master_addr": self.master_addr,
                    "master_port": master_port,
                    "tf_ports": tf_ports,
                    "python": self.python,
                    "envs": str(self.root / "envs"),
                    "allow_local_code": self.allow_local_code,
                    "isolation": self.isolation,
                    "uid": uid,
                    "gid": uid,
                    "launched_at": time.time(),
                    "local_source": os.path.realpath(local_path(job.code_url)) if is_local_code(job.code_url) else None,
                    "allowed_indexes": list(self.allowed_indexes),
                    "extra_ro_paths": list(self.extra_ro_paths),
                    "log_max_bytes": self.log_max_bytes,
                    "disk_max_bytes": self.disk_max_bytes,
                },
            )
            jobdir.write_state(phase=STARTING, launched_at=time.time())
            try:
                self._start_runner(jobdir, lock, adopt=False)
            except BaseException:
                jobdir.state_file.unlink(missing_ok=True)  # so that launching again tries again
                raise
        except (OSError, subprocess.SubprocessError) as exc:
            raise ExecutorError(f"cannot start job {job.job_id}: {exc}", permanent=False) from exc
        finally:
            os.close(lock)

    def poll(self, job_ids: list[str]) -> dict[str, ObservedState]:
        observed = {}
        for job_id in job_ids:
            jobdir = self._jobdir(job_id) if _JOB_ID.fullmatch(job_id) else None
            state = jobdir.state() if jobdir else None
            if state is None:
                continue
            if state.get("phase") not in FINAL_PHASES:
                state = self._supervise(jobdir) or state
            fields = {name: state[name] for name in _STATE_FIELDS if name in state}
            key = (read_json(jobdir.launch_file) or {}).get("job", {}).get("job_key") or job_id
            fields["checkpoint_at"] = checkpoint_at(jobdir.checkpoint(key))
            observed[job_id] = ObservedState(**fields)
        return observed

    def cancel(self, job_id: str, grace_seconds: int) -> None:
        jobdir = self._jobdir(job_id) if _JOB_ID.fullmatch(job_id) else None
        state = jobdir.state() if jobdir else None
        if state is None or state.get("phase") in FINAL_PHASES:
            return
        # The runner sees the request on its next look; without a runner, one is adopted to carry it out.
        if not jobdir.cancel_file.exists():
            write_json(jobdir.cancel_file, {"grace_seconds": grace_seconds, "requested_at": time.time()})
        self._supervise(jobdir)

    def logs(self, job_id: str, worker: int, since: int = 0) -> Iterator[str]:
        # Lines are decoded as UTF-8 with replacement: for a valid UTF-8 log whose lines are all shorter than
        # log_reader.LINE_MAX_BYTES, the next offset is since + sum(len(line.encode())) of what was yielded.
        cursor: log_reader.Cursor | None = log_reader.Cursor(max(0, since))
        while cursor is not None:
            read = self.read_log(job_id, worker, cursor=cursor)
            yield from read.lines
            cursor = read.cursor if read.cursor != cursor else None

    def read_log(
        self,
        job_id: str,
        worker: int,
        *,
        cursor: log_reader.Cursor | None = None,
        tail: int | None = None,
        line_max: int = log_reader.LINE_MAX_BYTES,
    ) -> log_reader.LogRead:
        """One bounded read of a worker's log: the last ``tail`` lines, or the lines after ``cursor``."""
        empty = log_reader.LogRead([], cursor or log_reader.Cursor())
        if not _JOB_ID.fullmatch(job_id):
            return empty
        jobdir = self._jobdir(job_id)
        # Looked at before reading: once final, nothing more will be written, so a last line without
        # a newline is complete.
        final = (jobdir.state() or {}).get("phase") in FINAL_PHASES
        try:
            log = open(jobdir.log_file(int(worker)), "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return empty
        with log:
            end = os.fstat(log.fileno()).st_size
            if cursor is None:
                return log_reader.tail(log, tail or 1, end=end, final=final, line_max=line_max)
            return log_reader.forward(log, cursor, end=end, final=final, line_max=line_max)

    # -- clean-up (local_cleanup.py)

    def remove_job_files(self, job_id: int, job_key: str) -> list[str]:
        """Delete the folders of a finished job: its runs (log, output, code), checkpoints and TensorBoard events."""
        return local_cleanup.remove_job_files(self.root, job_id=job_id, job_key=job_key)

    def evict_envs(self, unused_seconds: float, now: float | None = None) -> list[str]:
        """Delete job environments no job used for ``unused_seconds``; never one an unfinished job uses."""
        in_use = local_cleanup.envs_in_use(self.root)
        return local_cleanup.evict_unused(self.root / "envs", unused_seconds=unused_seconds, in_use=in_use, now=now)

    # -- helpers

    def _jobdir(self, job_id: str) -> JobDir:
        return JobDir(self.root / "jobs" / job_id)

    def _check(self, job: JobSpec, placement: Placement) -> None:
        problems = []
        if not _JOB_ID.fullmatch(job.job_id):
            problems.append(f"job id {job.job_id!r} cannot name a directory")
        url = job.code_url
        if problem := code_url_problem(url, allow_local=self.allow_local_code):
            problems.append(f"code_url {url!r}: {problem}")
        elif is_local_code(url):
            folder = local_path(url)
            real = os.path.realpath(folder)
            if not os.path.isabs(folder):
                problems.append(f"code_url {url!r} must be an absolute path")
            elif _inside(real, self.protected_paths) and not _inside(real, self.shared_code):
                problems.append(f"code_url {url!r} is inside the portal's own folders, which jobs cannot clone from")
        if self.isolation == "sandbox" and (missing := sandbox.available()):
            problems.append("this host cannot run sandboxed jobs: " + "; ".join(missing))
        elif self.isolation not in ("sandbox", "none"):
            problems.append(f"isolation {self.isolation!r} is not one of sandbox, none")
        for mount in job.mounts:
            # Checked again here, not only when the storage was saved: a symlink on the way may have moved since.
            real = os.path.realpath(mount.source)
            protected = _inside(real, self.protected_paths) and not (
                _inside(real, self.shared_storage) and real not in self.shared_storage
            )
            if not os.path.isabs(mount.source) or protected or real == "/":
                problems.append(f"storage {mount.name!r} points at {mount.source}, inside the portal's own folders")
            elif not os.path.isabs(mount.path) or ".." in mount.path.split("/") or _inside(mount.path, RESERVED_PATHS):
                problems.append(f"storage {mount.name!r} cannot be mounted at {mount.path}")
        for ref in (job.code_ref, job.commit):
            if ref and (ref.startswith("-") or any(ch.isspace() or ord(ch) < 32 for ch in ref)):
                problems.append(f"code ref {ref!r} is not a branch, tag or commit")
        ranks = sorted(w.worker for w in placement.workers)
        if job.workers < 1 or ranks != list(range(job.workers)):
            problems.append(f"placement has workers {ranks}, the job needs one per rank 0..{job.workers - 1}")
        if problems:
            raise ExecutorError("; ".join(problems), permanent=True)

    def _uid(self, department: str) -> int:
        """The uid of ``department``'s jobs, allocated once (under a lock) and never reused."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "uids.lock", "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            uids = read_json(self.root / "uids.json") or {}
            if department not in uids:
                uids[department] = self.uid_base + 1 + len(uids)
                write_json(self.root / "uids.json", uids)
            return int(uids[department])

    @staticmethod
    def _lock(jobdir: JobDir) -> int | None:
        """runner.lock, locked, as an fd; None when a runner holds it (so it is alive)."""
        fd = os.open(jobdir.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def _start_runner(self, jobdir: JobDir, lock: int, *, adopt: bool) -> None:
        """Start a runner that inherits our lock on runner.lock, so no other runner can sneak in between."""
        argv = [sys.executable, "-m", "jobs.executors.local_runner", str(jobdir.path), "--lock-fd", str(lock)]
        if adopt:
            argv.append("--adopt")
        with open(jobdir.runner_log, "ab") as log:
            # sh starts the runner in the background and exits at once: the runner is nobody's child
            # here, so it outlives this process and leaves no zombie in it.
            subprocess.run(
                ["sh", "-c", '"$@" &', "sh", *argv],
                cwd=_SOURCE_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(lock,),
                start_new_session=True,
                check=True,
                timeout=30,
            )

    def _supervise(self, jobdir: JobDir) -> dict | None:
        """If the job's runner is dead: adopt its live workers, or end the job. The new state, if any."""
        try:
            lock = self._lock(jobdir)
        except OSError:
            return None
        if lock is None:
            return None  # the runner is alive
        try:
            state = conclude_unsupervised(jobdir)
            if state is None:
                self._start_runner(jobdir, lock, adopt=True)
            return state
        except (OSError, subprocess.SubprocessError):
            return None  # the next poll tries again
        finally:
            os.close(lock)
