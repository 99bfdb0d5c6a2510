"""What the executor tests share: polling with a deadline (wait_for), git repositories built in tmp_path
(GitRepo), small wheels and packages for the requirements tests, the scripts jobs run (DUMP_ENV, MEET), and
Harness, which the executor contract suite (executor_contract.py) drives an executor through.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import time
import uuid
import zipfile
from pathlib import Path

from jobs.executors.base import FINAL_PHASES, JobSpec, Mount, ObservedState, Placement, WorkerPlacement


def wait_for(predicate, *, timeout: float = 30, interval: float = 0.05, what: str = "the condition"):
    """The first truthy value of ``predicate()``, polled every ``interval`` seconds up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class GitRepo:
    """A real git repository on disk, built commit by commit."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True)
        self.git("init", "--quiet", "--initial-branch", "main")

    def git(self, *args: str) -> str:
        done = subprocess.run(
            [
                "git",
                "-c",
                "user.name=Portal Tests",
                "-c",
                "user.email=tests@portal.invalid",
                "-c",
                "commit.gpgsign=false",
                *args,
            ],
            cwd=self.path,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        return done.stdout.strip()

    def commit(self, files: dict[str, str], message: str = "change") -> str:
        for name, text in files.items():
            (self.path / name).write_text(text)
        self.git("add", "--all")
        self.git("commit", "--quiet", "-m", message)
        return self.git("rev-parse", "HEAD")


def tiny_wheel(folder: Path, name: str = "tinypkg", version: str = "1.0") -> Path:
    """A pure-Python wheel written by hand (a wheel is a zip with a dist-info), so no build tool or network."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VALUE = '{name} {version} imported'\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: portal-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = (
        "".join(
            f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},{len(text.encode())}\n"
            for path, text in files.items()
        )
        + f"{info}/RECORD,,\n"
    )
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(path, text)
    return wheel


def slow_package(folder: Path) -> str:
    """A requirement whose in-tree build backend never ends (the environment build hangs)."""
    folder.mkdir()
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        '[project]\nname = "slowpkg"\nversion = "1.0"\n'
    )
    (folder / "backend.py").write_text(
        "import time\n"
        "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
        "def prepare_metadata_for_build_wheel(directory, config_settings=None):\n    time.sleep(600)\n"
        "def build_wheel(directory, config_settings=None, metadata_directory=None):\n    time.sleep(600)\n"
    )
    return f"slowpkg @ {folder.as_uri()}"


# The command's view of its environment, written where the job's artifacts go.
DUMP_ENV = """\
import json, os, pathlib
env = dict(os.environ)
data = {k: v for k, v in env.items() if k.startswith("PORTAL_DATA_")}
seen = {
    "env": env,
    "cwd_files": sorted(os.listdir(".")),
    "dirs": {k: os.path.isdir(env[k]) for k in ("TENSORBOARD_LOG_DIR", "PORTAL_OUTPUT_DIR")},
    "data_files": {k: pathlib.Path(v, "hello.txt").read_text() for k, v in data.items()},
}
pathlib.Path(env["PORTAL_OUTPUT_DIR"], "env-%s.json" % env["RANK"]).write_text(json.dumps(seen))
"""

# Rank 0 listens at MASTER_ADDR:MASTER_PORT, rank 1 connects to it; each prints what the other said.
MEET = """\
import os, socket, time
addr, port, rank = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), int(os.environ["RANK"])
if rank == 0:
    with socket.create_server((addr, port)) as server:
        conn, _ = server.accept()
        with conn:
            print("rank 0 heard:", conn.recv(100).decode())
            conn.sendall(b"hello rank 1, rank 0 here")
else:
    deadline = time.monotonic() + 20
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with sock:
        sock.sendall(b"hello rank 0, rank 1 here")
        print("rank 1 heard:", sock.recv(100).decode())
"""


class Harness:
    """How the suite drives one executor. Subclasses fill in the executor-specific parts."""

    node = "node-1"

    def __init__(self, executor):
        self.executor = executor
        self.launched: list[str] = []

    # -- executor-specific

    def code_url(self, path: Path) -> str:
        """The address the executor clones the git repository at ``path`` from."""
        raise NotImplementedError

    def mount(self, name: str, tmp_path: Path) -> Mount:
        """A storage mount named ``name`` holding hello.txt with the text ``name``."""
        raise NotImplementedError

    def output(self, job_id: str) -> Path:
        """Where the test can read what the job wrote to PORTAL_OUTPUT_DIR."""
        raise NotImplementedError

    def assert_released(self, job_id: str) -> None:
        """Fail unless nothing of the job runs any more (its GPUs are free)."""
        raise NotImplementedError

    def installed_line(self, package: str, version: str) -> str:
        """What the executor's installer prints for a package it installed (pip's words by default)."""
        return f"Successfully installed {package}-{version}"

    # -- shared

    def new_id(self, prefix: str = "job") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def spec(self, code_url: str, command: str, **fields) -> JobSpec:
        job_id = fields.pop("job_id", None) or self.new_id()
        defaults = {
            "name": job_id,
            "department": "vision",
            "code_ref": None,
            "framework": "python",
            "image": "python:3.11",
        }
        return JobSpec(job_id=job_id, code_url=code_url, command=command, **{**defaults, **fields})

    def placement(self, *workers: tuple[int, ...], fractions: dict[int, float] | None = None) -> Placement:
        """One worker per tuple of GPU indices, all on ``node``."""
        fractions = fractions or {}
        return Placement(
            tuple(
                WorkerPlacement(worker=rank, node=self.node, gpus=gpus, gpu_fraction=fractions.get(rank))
                for rank, gpus in enumerate(workers or [()])
            )
        )

    def launch(self, spec: JobSpec, placement: Placement | None = None) -> str:
        self.launched.append(spec.job_id)
        self.executor.launch(spec, placement or self.placement(*[()] * spec.workers))
        return spec.job_id

    def state(self, job_id: str) -> ObservedState:
        return self.executor.poll([job_id])[job_id]

    def wait_final(self, job_id: str, timeout: float = 30) -> ObservedState:
        return wait_for(
            lambda: (s := self.state(job_id)).phase in FINAL_PHASES and s,
            timeout=timeout,
            what=f"{job_id} to end",
        )

    def log(self, job_id: str, worker: int = 0) -> str:
        return "".join(self.executor.logs(job_id, worker))

    def wait_log(self, job_id: str, text: str, worker: int = 0, timeout: float = 30) -> str:
        return wait_for(
            lambda: text in (log := self.log(job_id, worker)) and log, timeout=timeout, what=f"{text!r} in the log"
        )

    def cleanup(self) -> None:
        """Stop whatever a failed test left running, and check that every job let go of everything."""
        for job_id in self.launched:
            if self.executor.poll([job_id]).get(job_id, ObservedState("succeeded")).phase not in FINAL_PHASES:
                self.executor.cancel(job_id, 0)
                self.wait_final(job_id)
        for job_id in self.launched:
            self.assert_released(job_id)


def command_output(log: str) -> list[str]:
    """The lines the command printed (without the executor's own setup lines)."""
    return [line for line in log.splitlines() if not line.startswith("[portal]")]
