"""Model servers on this host (an adapter, like tensorboards/backends.py): one detached
``python -m serving.backends.server`` process per variant. No Django here:
serving/servers.py owns the rows and the rules (when to start, restart, stop).

Folder: <root>/<server_id>/server.log (its output, to say why it died).

Servers listen on 127.0.0.1 only (jobs' sandboxes have a loopback of their own), and ``owns`` tells
whether the process on a server's port is still the one started here (clusters/listeners.py).
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from clusters import listeners, local_procs, sandbox
from clusters.backends import BackendError, ProcessBackend, free_port


class ServingError(BackendError):
    """A server could not be started or reached; ``permanent`` says whether trying again can help."""


@dataclass(frozen=True)
class ServerSpec:
    server_id: int  # the variant's id: one server per variant
    model_name: str  # the KServe name in /v1/models/<name>
    artifact: Path  # inside store_root (the server refuses anything else)
    store_root: Path
    faults: dict = field(default_factory=dict)  # {"delay_ms": .., "fail_rate": ..}: injected by tests


@dataclass(frozen=True)
class ServerProcess:
    url: str  # http://127.0.0.1:<port>
    model_name: str
    pid: int | None = None
    handle: str = ""  # the process start time in clock ticks: immune to PID reuse


class ServingBackend(ProcessBackend[ServerSpec, ServerProcess], Protocol):
    """start, alive, ready (does it answer KServe's readiness call with ready=true?), stop, output
    (clusters.backends), and:"""

    def running(self) -> dict[int, ServerProcess]:
        """Every server this backend started that is still alive, by server id (to find orphans)."""

    def forget(self, server_id: int) -> None:
        """Drop what is kept of a stopped server (its folder)."""


class LocalServingBackend:
    def __init__(
        self, root: Path, *, python: str | None = None, stop_grace_seconds: float = 5, sandboxed: bool | None = None
    ):
        self.root = Path(root)
        self.python = python or sys.executable
        self.stop_grace_seconds = stop_grace_seconds
        self.sandboxed = not sandbox.available() if sandboxed is None else sandboxed

    def start(self, spec: ServerSpec) -> ServerProcess:
        folder = self.root / str(spec.server_id)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ServingError(
                f"cannot prepare the folder of model server {spec.server_id}: {exc}", permanent=False
            ) from exc
        port = free_port()
        argv = [
            self.python,
            "-m",
            "serving.backends.server",
            "--model-name",
            spec.model_name,
            "--artifact",
            str(spec.artifact),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--store",
            str(spec.store_root),
        ]
        for name, value in sorted(spec.faults.items()):
            argv += [f"--{name.replace('_', '-')}", str(value)]
        checkout = Path(__file__).resolve().parents[2]
        extra_env = {"PYTHONPATH": str(checkout)}
        if self.sandboxed:
            # The artifact is a job's pickle: loading it runs the job's code. The server sees that artifact, its
            # own module and the Python it runs on, nothing else of the portal (not its data root, not the store).
            argv = sandbox.server_argv(
                argv,
                readable=[str(spec.artifact), str(checkout / "serving")],
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONPATH": str(checkout)},
            )
        try:
            pid, started = local_procs.start_detached(argv, log=folder / "server.log", extra_env=extra_env)
            if self.sandboxed:
                pid = sandbox.server_pid(pid)
                started = local_procs.start_time(pid)
        except (OSError, ValueError, subprocess.SubprocessError, sandbox.SandboxError) as exc:
            raise ServingError(f"cannot start the model server: {exc}", permanent=False) from exc
        process = ServerProcess(
            url=f"http://127.0.0.1:{port}", model_name=spec.model_name, pid=pid, handle=str(started or "")
        )
        # Written down here too, so that a server whose variant (and row) is gone can still be found and stopped.
        (folder / "process.json").write_text(json.dumps(asdict(process)))
        return process

    def ready(self, process: ServerProcess) -> bool:
        host, port = process.url.removeprefix("http://").rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=1)
        try:
            connection.request("GET", f"/v1/models/{process.model_name}")
            response = connection.getresponse()
            return response.status == 200 and json.loads(response.read()).get("ready") is True
        except (OSError, ValueError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def owns(self, process: ServerProcess) -> bool:
        """Does the process started here (or a child of it) hold every listener on its port?"""
        host, _, port = process.url.removeprefix("http://").rpartition(":")
        try:
            return listeners.is_ours(process.pid, int(process.handle) if process.handle else None, host, int(port))
        except (OSError, ValueError):
            return False

    def alive(self, process: ServerProcess) -> bool:
        return process.pid is not None and local_procs.alive(
            process.pid, int(process.handle) if process.handle else None
        )

    def stop(self, process: ServerProcess) -> None:
        local_procs.stop_detached(
            process.pid, int(process.handle) if process.handle else None, grace=self.stop_grace_seconds
        )

    def output(self, server_id: int) -> str:
        return local_procs.log_tail(self.root / str(server_id) / "server.log")

    def running(self) -> dict[int, ServerProcess]:
        found = {}
        for record in self.root.glob("*/process.json"):
            try:
                process = ServerProcess(**json.loads(record.read_text()))
            except (OSError, ValueError, TypeError):
                continue
            if record.parent.name.isdigit() and self.alive(process):
                found[int(record.parent.name)] = process
        return found

    def forget(self, server_id: int) -> None:
        shutil.rmtree(self.root / str(server_id), ignore_errors=True)
