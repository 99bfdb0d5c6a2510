"""The layout of a local job's directory, <root>/jobs/<job_id>/ (JobDir), and reading it back.

Owns which file holds what (launch.json, state.json, runner.lock, groups.json, cancel.json, the
worker logs and exit files), atomic JSON writes (write_json) and tolerant reads (read_json), and
turning launch.json back into a JobSpec and a Placement. Shared by LocalExecutor (local.py) and the
runner (local_runner.py); it starts no process and signals none.
"""

from __future__ import annotations

import json
import os
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
        try:
            return int(self.exit_file(rank).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def tail(self, rank: int, lines: int = TAIL_LINES) -> str:
        try:
            with open(self.log_file(rank), "rb") as log:
                log.seek(max(0, os.fstat(log.fileno()).st_size - 64 * 1024))
                text = log.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def spec_from_dict(data: dict) -> JobSpec:
    data = dict(data)
    data["mounts"] = tuple(Mount(**m) for m in data.get("mounts", ()))
    for name in ("base_packages", "requirements"):
        data[name] = tuple(data.get(name, ()))
    return JobSpec(**data)


def placement_from_dict(data: dict) -> Placement:
    return Placement(tuple(WorkerPlacement(**{**w, "gpus": tuple(w["gpus"])}) for w in data["workers"]))
