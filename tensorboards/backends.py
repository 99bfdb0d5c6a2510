"""TensorBoard servers behind a small interface (an adapter, like the executors): the local backend runs
`tensorboard` processes on this host; the Kubernetes backend (Deployment + Service) is in tensorboard_k8s.py.
No Django here: `tensorboards.services` owns the rules and the records.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from clusters import listeners, local_procs, sandbox
from clusters.backends import BackendError, ProcessBackend, free_port


class BoardError(BackendError):
    """A board could not be started or reached; ``permanent`` says whether trying again can help."""


@dataclass(frozen=True)
class BoardSpec:
    board_id: int
    path_prefix: str  # "/tensorboard/5": TensorBoard serves its UI and data API under it
    runs: tuple[tuple[str, str], ...]  # (run name, folder of event files)


@dataclass(frozen=True)
class BoardProcess:
    host: str
    port: int
    pid: int | None = None
    handle: str = ""  # backend-specific identity (local: the process start time in clock ticks)


class BoardBackend(ProcessBackend[BoardSpec, BoardProcess], Protocol):
    """start, alive, ready (does it answer on its port?), stop, output (clusters.backends), and:"""

    def sync_runs(self, spec: BoardSpec) -> None:
        """Show exactly ``spec.runs`` on a running board (a job got a new run since the start)."""


class LocalBoardBackend:
    """`tensorboard` processes on this host, detached so they outlive the request that started them.

    Folder: <root>/<board_id>/runs/ (one link per run, the --logdir) and tensorboard.log (its output).
    Links rather than --logdir_spec so that a job's new run shows up without a restart.
    """

    def __init__(
        self, root: Path, *, binary: Path | None = None, stop_grace_seconds: float = 5, sandboxed: bool | None = None
    ):
        self.root = Path(root)
        self.binary = binary or Path(sys.executable).parent / "tensorboard"
        self.stop_grace_seconds = stop_grace_seconds
        # The event folders are the jobs': a link a job leaves there must lead nowhere but into its own folder.
        self.sandboxed = not sandbox.available() if sandboxed is None else sandboxed

    def start(self, spec: BoardSpec) -> BoardProcess:
        if not self.binary.exists():
            raise BoardError(f"TensorBoard is not installed: {self.binary} is missing.", permanent=True)
        self.sync_runs(spec)
        port = free_port()
        # --host 127.0.0.1: never the wildcard; jobs' sandboxes have their own loopback, so it is out of their reach.
        # --load_fast false: the pure-Python loader, not the Rust data server (one process, no extra binary).
        runs = self._folder(spec.board_id) / "runs"
        argv = [
            str(self.binary),
            "--logdir",
            str(runs),
            "--path_prefix",
            spec.path_prefix,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast",
            "false",
        ]
        if self.sandboxed:
            for _name, folder in spec.runs:  # a job's folder the board opens before the job ran (it must be there)
                with contextlib.suppress(OSError):
                    os.makedirs(folder, exist_ok=True)
            # It sees the runs' folders and nothing else of this disk (a run added later needs a restart to show,
            # unless it is a new run-<n> inside a job's folder, which is already there).
            argv = sandbox.server_argv(
                argv,
                readable=[str(runs), *(folder for _name, folder in spec.runs)],
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            )
        try:
            pid, started = local_procs.start_detached(argv, log=self._folder(spec.board_id) / "tensorboard.log")
            if self.sandboxed:
                pid = sandbox.server_pid(pid)
                started = local_procs.start_time(pid)
        except (OSError, ValueError, subprocess.SubprocessError, sandbox.SandboxError) as exc:
            raise BoardError(f"cannot start TensorBoard: {exc}", permanent=False) from exc
        return BoardProcess(host="127.0.0.1", port=port, pid=pid, handle=str(started or ""))

    def sync_runs(self, spec: BoardSpec) -> None:
        runs = self._folder(spec.board_id) / "runs"
        try:
            runs.mkdir(parents=True, exist_ok=True)
            wanted = dict(spec.runs)
            for link in runs.iterdir():
                if link.name not in wanted or os.readlink(link) != wanted[link.name]:
                    link.unlink()
            for name, folder in wanted.items():
                if not (runs / name).is_symlink():
                    (runs / name).symlink_to(folder, target_is_directory=True)
        except OSError as exc:
            raise BoardError(f"cannot prepare the runs of TensorBoard {spec.board_id}: {exc}", permanent=False) from exc

    def alive(self, process: BoardProcess) -> bool:
        return process.pid is not None and local_procs.alive(
            process.pid, int(process.handle) if process.handle else None
        )

    def owns(self, process: BoardProcess) -> bool:
        """Does the process started here (or a child of it) hold every listener on its address? A job that
        killed the board and bound its port must never be proxied to. TensorBoard has no Unix-socket flag."""
        try:
            return listeners.is_ours(
                process.pid, int(process.handle) if process.handle else None, process.host, process.port
            )
        except (OSError, ValueError):
            return False

    def ready(self, process: BoardProcess) -> bool:
        try:
            with socket.create_connection((process.host, process.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self, process: BoardProcess) -> None:
        local_procs.stop_detached(
            process.pid, int(process.handle) if process.handle else None, grace=self.stop_grace_seconds
        )

    def output(self, board_id: int) -> str:
        return local_procs.log_tail(self._folder(board_id) / "tensorboard.log")

    def _folder(self, board_id: int) -> Path:
        return self.root / str(board_id)
