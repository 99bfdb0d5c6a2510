"""The layout of a local run's directory, <root>/jobs/<run_id>/ (JobDir), and reading it back.

Owns which file holds what (launch.json, state.json, runner.lock, groups.json, cancel.json, workers.json, the
worker logs and exit files), the folders kept per job across its runs (<root>/checkpoints/<job_key>/ and
<root>/tensorboard/<job_key>/run-<run_index>/), atomic JSON writes (write_json) and tolerant reads (read_json),
and turning launch.json back into a JobSpec and a Placement. Shared by LocalExecutor (local.py) and the
runner (local_runner.py); it starts no process and signals none.

What the job itself may write (code, output, tmp, exit, the per-job folders) belongs to the job's uid and is
read here as hostile: never through a symlink (O_NOFOLLOW), never more than a few bytes of an exit file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from jobs.executors.base import JobSpec, Mount, Placement, WorkerPlacement

TAIL_LINES = 20


def write_json(path: Path, data) -> None:
    """Atomically: readers see the old content or the new, never half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class JobDir:
    """The files of one job under <root>/jobs/<job_id>/."""

    def __init__(self, path: Path):
        self.path = path
        self.code = path / "code"
        self.output = path / "output"
        self.tensorboard = path / "tensorboard"
        self.logs = path / "logs"
        self.exits = path / "exit"
        self.launch_file = path / "launch.json"  # spec, placement, ports, python: written once by launch()
        self.state_file = path / "state.json"  # the ObservedState fields
        self.lock_file = path / "runner.lock"  # held by the live runner
        self.runner_file = path / "runner.json"  # pid + start time of the last runner (for people and tests)
        self.groups_file = path / "groups.json"  # process groups: the current setup step and each worker
        self.cancel_file = path / "cancel.json"  # a cancel request: grace_seconds
        self.runner_log = path / "runner.log"
        self.tmp = path / "tmp"  # the sandbox's /tmp (and HOME); removed when the run ends
        self.files = path / "sandbox"  # small files a sandbox gets (passwd, resolv.conf)
        self.workers_file = path / "workers.json"  # what the sandbox's first process starts (sandbox_init.py)
        self.executor_root = path.parent.parent

    def checkpoint(self, job_key: str) -> Path:
        """PORTAL_CHECKPOINT_DIR: one folder per job, kept across its runs."""
        return self.executor_root / "checkpoints" / job_key

    def tensorboard_run(self, job_key: str, run_index: int) -> Path:
        """TENSORBOARD_LOG_DIR of one run: the job's board shows every run-<n> beside each other."""
        return self.executor_root / "tensorboard" / job_key / f"run-{run_index}"

    def belongs_to(self, job_key: str) -> bool:
        """Is this run one of the job's with that key, not a namesake's (ids start again when a database is
        recreated)? Runs launched since job keys existed say whose they are; older ones cannot, and are taken
        as the job's."""
        key = ((read_json(self.launch_file) or {}).get("job") or {}).get("job_key")
        return not key or key == job_key

    def log_file(self, rank: int) -> Path:
        return self.logs / f"worker-{rank}.log"

    def exit_file(self, rank: int) -> Path:
        return self.exits / f"worker-{rank}"

    def state(self) -> dict | None:
        return read_json(self.state_file)

    def write_state(self, **changes) -> dict:
        state = {**(self.state() or {}), **changes}
        write_json(self.state_file, state)
        return state

    def groups(self) -> dict:
        return read_json(self.groups_file) or {"setup": None, "workers": {}}

    def cancel_request(self) -> dict | None:
        return read_json(self.cancel_file) if self.cancel_file.exists() else None

    def exit_code(self, rank: int) -> int | None:
        text = read_small(self.exit_file(rank))
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    def launcher_groups(self) -> dict[int, int]:
        """rank -> process group of each worker, as the launcher recorded them (trusted mode only)."""
        try:
            return {
                int(rank): int(pgid)
                for rank, pgid in json.loads(read_small(self.exits / "groups.json") or "{}").items()
            }
        except (ValueError, TypeError, AttributeError):
            return {}

    def tail(self, rank: int, lines: int = TAIL_LINES) -> str:
        try:
            with open(self.log_file(rank), "rb") as log:
                log.seek(max(0, os.fstat(log.fileno()).st_size - 64 * 1024))
                text = log.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def read_small(path: Path, limit: int = 4096) -> str | None:
    """A small file the job could have tampered with: not through a symlink, not a FIFO, at most ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", "replace")
    finally:
        os.close(fd)


def checkpoint_at(folder: Path) -> float | None:
    """The mtime of the job's .portal-checkpoint marker, if it wrote one (a regular file, not a link)."""
    try:
        info = os.lstat(folder / ".portal-checkpoint")
    except OSError:
        return None
    return info.st_mtime if stat.S_ISREG(info.st_mode) else None


def spec_from_dict(data: dict) -> JobSpec:
    data = dict(data)
    data["mounts"] = tuple(Mount(**m) for m in data.get("mounts", ()))
    for name in ("base_packages", "requirements"):
        data[name] = tuple(data.get(name, ()))
    return JobSpec(**data)


def placement_from_dict(data: dict) -> Placement:
    return Placement(tuple(WorkerPlacement(**{**w, "gpus": tuple(w["gpus"])}) for w in data["workers"]))
