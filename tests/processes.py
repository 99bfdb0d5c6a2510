"""Real portal processes (the uvicorn web process, Celery worker) for end-to-end tests, on the test database."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

from bench.web_server import uvicorn_argv
from jobs import running

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def test_database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def process_env() -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = test_database_url()
    env["PORTAL_DATA_ROOT"] = str(settings.PORTAL_DATA_ROOT)
    env.setdefault("PORTAL_LOG_LEVEL", "WARNING")
    return env


def wait_for(
    predicate, *, timeout: float = 60.0, what: str = "condition", reconcile: bool = True, interval: float = 0.1
):
    """Poll until ``predicate()`` is truthy (its value); reconcile the jobs meanwhile as the periodic task does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if reconcile:
            running.jobs_reconcile()
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, deadline_seconds: float = 60) -> None:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port} after {deadline_seconds} s")


class Processes:
    """Start, and always stop, a set of portal processes whose output goes to files."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.running: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        """``env``: settings of this process on top of process_env()'s."""
        full_env = process_env() | (env or {})
        with open(self.log_dir / f"{name}.log", "wb") as log:  # the child keeps its own copy of the descriptor
            process = subprocess.Popen(argv, cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT)
        self.running.append((name, process))
        return process

    def migrate_channel_layer(self) -> None:
        if "channels" in settings.DATABASES:
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "--database", "channels", "-v0"],
                cwd=ROOT,
                env=process_env(),
                check=True,
                timeout=120,
            )

    def purge_broker(self) -> None:
        """Drop messages earlier tests left for a worker that never ran."""
        if settings.CELERY_BROKER_URL.startswith("filesystem://"):
            folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
        else:
            from core.celery import app

            app.control.purge()

    def web(self, env: dict[str, str] | None = None, app: str = "config.asgi:application") -> int:
        """The web process as `make run` starts it (uvicorn, bench/web_server.py), serving ``app``; its port."""
        port = free_port()
        process = self.start("web", uvicorn_argv(port, app), env)
        wait_for_port(port, process)
        return port

    def web_process(self) -> subprocess.Popen:
        return next(process for name, process in self.running if name == "web")

    def worker(self) -> subprocess.Popen:
        return self.start(
            "worker",
            [
                str(BIN / "celery"),
                "--app",
                "config",
                "worker",
                "--pool",
                "solo",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
        )

    def beat(self) -> subprocess.Popen:
        """Celery beat: the periodic tasks (job reconcile every PORTAL_RECONCILE_SECONDS, idle TensorBoards).

        Its schedule file goes where the settings put it: under the process's PORTAL_DATA_ROOT.
        """
        return self.start("beat", [str(BIN / "celery"), "--app", "config", "beat", "--loglevel", "INFO"])

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name} ---\n{p.read_text(errors='replace')}" for p in sorted(self.log_dir.glob("*.log"))
        )

    def stop(self) -> None:
        for _, process in self.running:
            process.terminate()
        for _, process in self.running:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
