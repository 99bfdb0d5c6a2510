"""The supervisor of one local job: ``python -m jobs.executors.local_runner <job_dir> --lock-fd N [--adopt]``.

Owns everything that happens to a job after LocalExecutor.launch(): fetching the code with git, getting its
virtualenv, starting its workers, and ending the job (success, a failed worker, cancel, deadline, setup
timeout), with every phase recorded in state.json. The layout of a job directory (JobDir) is in
local_jobdir.py, what a sandbox sees in sandbox.py, the process bookkeeping in local_procs.py.

With ``isolation: sandbox`` (the default) every step that runs a stranger's code or touches the network runs
in a bubblewrap sandbox under the department's uid: the clone and checkout (a setup sandbox that sees only
the code folder, and the repository when it is on this disk), the environment build (a build sandbox of its
own that sees only the env being built and the department's cache), and the workers, all together in one
sandbox whose first process is sandbox_init.py (the launcher). The runner itself stays outside, as the
portal's user: it writes the logs (the workers get file descriptors, never the folder), reads exit codes
without following links, and ends the job by ending the sandbox's PID namespace. With ``isolation: none``
(a trusted single-user machine) the same steps run as plain processes of the portal's user.

A runner holds an flock on runner.lock for its whole life, handed over by whoever started it; a lock that can
be taken means no runner is alive (immune to PID reuse, released even on SIGKILL). With --adopt it takes over
a job whose runner died: the workers never depended on it, so it only watches the sandbox and the exit files.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from clusters import sandbox
from jobs.executors import venvs
from jobs.executors.base import (
    CANCELLED, FAILED, FINAL_PHASES, LOST, RUNNING, SUCCEEDED, JobSpec, WorkerPlacement,
)
from jobs.executors.local_jobdir import (
    TAIL_LINES, JobDir, placement_from_dict, read_json, read_small, spec_from_dict, write_json,
)
from clusters.local_procs import TICK, alive, become_subreaper, kill_groups, live_groups, ours, reap, start_time
from core.requirements import requirement_problems

LAUNCHER = Path(__file__).with_name("sandbox_init.py")

RESERVED = (
    "PORTAL_JOB_ID", "PORTAL_JOB_NAME", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
    "TF_CONFIG", "CUDA_VISIBLE_DEVICES", "PORTAL_GPU_FRACTION", "TENSORBOARD_LOG_DIR", "PORTAL_OUTPUT_DIR",
    "PORTAL_CHECKPOINT_DIR", "PORTAL_RUN_INDEX", "PORTAL_RESUMED", "VIRTUAL_ENV", "PYTHONUNBUFFERED",
)

# What jobs inherit from the host: the portal's own settings (database URL, secrets) stay out.
_INHERITED = {
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH", "CUDA_HOME",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "http_proxy", "https_proxy", "no_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
}
_INHERITED_PREFIXES = ("LC_",)
_SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_MAX_REQUIREMENTS_FILE = 256 * 1024

# Where a sandboxed job finds its folders.
CODE_AT, OUTPUT_AT, TENSORBOARD_AT, CHECKPOINT_AT = "/portal/code", "/portal/output", "/portal/tensorboard", "/portal/checkpoint"
EXIT_AT, WORKERS_AT, LAUNCHER_AT = "/portal/exit", "/portal/workers.json", "/portal/init.py"
SOURCE_AT = "/portal/source"  # a repository on this host's disk (clusters that allow local code)
SANDBOX_MASTER_PORT = 29500
LAUNCHER_SWEEP_SECONDS = 5
# Clone "$1" into "$2", check out "$3" if given, write the commit to "$4". `--` makes a ref that is also a file
# name mean the ref; git still turns a remote branch name into a local branch.
FETCH = ('git clone --quiet -- "$1" "$2" && cd "$2" && { [ -z "$3" ] || git checkout --quiet "$3" --; } '
         '&& git rev-parse --verify HEAD > "$4"')  # the sandbox has a network namespace of its own: any port is free


def inherited_env(*, sandboxed: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _INHERITED or k.startswith(_INHERITED_PREFIXES)}
    if sandboxed:
        # Paths of the host mean nothing inside, and the job's HOME is its own /tmp.
        env = {k: v for k, v in env.items() if k not in {"PATH", "HOME", "TMPDIR", "LD_LIBRARY_PATH", "USER", "LOGNAME"}}
        env.update(PATH=_SANDBOX_PATH, HOME="/tmp", TMPDIR="/tmp", USER="job", LOGNAME="job")
    return env


# -------------------------------------------------------------------------------------------- endings


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
        phase=ended.phase, reason=ended.reason, message=ended.message, exit_code=ended.exit_code,
        finished_at=time.time(),
    )


def _pod_alive(pod: dict | None) -> bool:
    return bool(pod) and alive(pod["pid"], pod["starttime"])


def kill_pod(job: JobDir, pod: dict | None, *, grace: float, children=None) -> None:
    """End the job's workers: SIGTERM (the launcher passes it on), ``grace`` seconds, then the whole sandbox."""
    if not _pod_alive(pod):
        _kill_leftover_groups(job)
        return
    if grace > 0:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pod["pid"], signal.SIGTERM)
        deadline = time.monotonic() + grace
        while _pod_alive(pod) and time.monotonic() < deadline:
            reap(children)
            time.sleep(TICK)
    # SIGKILL of a PID namespace's init ends every process in it; without a sandbox the workers' groups too.
    _kill_leftover_groups(job)
    if (read_json(job.launch_file) or {}).get("isolation") == "none":
        # Unsandboxed, the launcher is the subreaper of what the workers left and kills it generation by
        # generation once they are done: let it finish before it goes (killing it first would orphan the rest).
        until = time.monotonic() + LAUNCHER_SWEEP_SECONDS
        while _pod_alive(pod) and time.monotonic() < until:
            reap(children)
            time.sleep(TICK)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pod["pid"], signal.SIGKILL)
    until = time.monotonic() + 10
    while _pod_alive(pod) and time.monotonic() < until:
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
    if state.get("phase") == RUNNING and _pod_alive(pod):
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


# --------------------------------------------------------------------------------------------- runner


def _without_portal_venv(path: str) -> str:
    # The portal's own virtualenv must not be on a job's PATH: `pip install` there would change the portal.
    if sys.prefix == sys.base_prefix:
        return path
    portal_bin = os.path.join(sys.prefix, "bin")
    return ":".join(entry for entry in path.split(":") if os.path.realpath(entry) != os.path.realpath(portal_bin))


def env_name(name: str) -> str:
    return "PORTAL_DATA_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


@dataclasses.dataclass(frozen=True)
class View:
    """Where the job's folders are, as its commands see them (sandbox paths, or the host's in trusted mode)."""

    code: str
    output: str
    tensorboard: str
    checkpoint: str
    env: str
    master_port: int
    mounts: dict[str, str]  # storage name -> path


def worker_env(
    spec: JobSpec, placement: WorkerPlacement, *, local_rank: int, view: View, launch: dict, sandboxed: bool,
    visible_gpus: str | None = None,
) -> dict[str, str]:
    """The job environment contract (DESIGN.md), as one worker sees it."""
    env = inherited_env(sandboxed=sandboxed)
    env.update({k: v for k, v in spec.env.items() if k not in RESERVED})
    path = env.get("PATH") or os.defpath
    env.update({
        "PORTAL_JOB_ID": spec.job_id,
        "PORTAL_JOB_NAME": spec.name,
        "WORLD_SIZE": str(spec.workers),
        "RANK": str(placement.worker),
        "LOCAL_RANK": str(local_rank),
        "MASTER_ADDR": "127.0.0.1" if sandboxed else launch["master_addr"],
        "MASTER_PORT": str(view.master_port),
        "CUDA_VISIBLE_DEVICES": visible_gpus if visible_gpus is not None else ",".join(str(g) for g in placement.gpus),
        "TENSORBOARD_LOG_DIR": view.tensorboard,
        "PORTAL_OUTPUT_DIR": view.output,
        "PORTAL_CHECKPOINT_DIR": view.checkpoint,
        "PORTAL_RUN_INDEX": str(spec.run_index),
        "VIRTUAL_ENV": view.env,
        "PATH": f"{view.env}/bin:{_without_portal_venv(path)}",
        "PYTHONUNBUFFERED": "1",
    })
    if spec.run_index > 0:
        env["PORTAL_RESUMED"] = "1"
    for mount in spec.mounts:
        env[env_name(mount.name)] = view.mounts[mount.name]
    if placement.gpu_fraction is not None:
        env["PORTAL_GPU_FRACTION"] = str(placement.gpu_fraction)
    if spec.framework == "tensorflow":
        addr = "127.0.0.1" if sandboxed else launch["master_addr"]
        ports = [SANDBOX_MASTER_PORT + 1 + i for i in range(spec.workers)] if sandboxed else launch["tf_ports"]
        hosts = [f"{addr}:{port}" for port in ports]
        env["TF_CONFIG"] = json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": placement.worker}})
    return env


class Runner:
    def __init__(self, job: JobDir):
        self.job = job
        self.launch = read_json(job.launch_file)
        self.spec = spec_from_dict(self.launch["job"])
        self.placement = placement_from_dict(self.launch["placement"])
        self.sandboxed = self.launch.get("isolation", "sandbox") == "sandbox"
        self.uid, self.gid = self.launch.get("uid"), self.launch.get("gid")
        self.python = self.launch["python"]
        self.workers: list[Worker] = [Worker(rank) for rank in range(self.spec.workers)]
        self.pod: dict | None = None  # the sandbox (or launcher) running the workers: pid, starttime
        self.proc: subprocess.Popen | None = None
        self.setup_group: dict | None = None
        self.setup_deadline = float(self.launch.get("launched_at") or time.time()) + self.spec.setup_timeout_seconds
        self.checkpoint_dir = job.checkpoint(self.spec.job_key or self.spec.job_id)
        self.tensorboard_dir = job.tensorboard_run(self.spec.job_key or self.spec.job_id, self.spec.run_index)

    # -- the whole life of a job

    def run(self) -> Ended:
        self.prepare_folders()
        self.check_cancel()
        commit = self.fetch_code()
        self.job.write_state(commit=commit)
        env_dir = self.environment()
        self.check_cancel()
        self.check_setup_time()
        self.start_workers(env_dir)
        self.job.write_state(phase=RUNNING, started_at=time.time())
        return self.watch()

    def adopt(self) -> Ended:
        self.pod = self.job.groups().get("pod")
        return self.watch()

    def finish(self, ended: Ended) -> None:
        # Nothing of the job outlives its ending: that is what releases its GPUs.
        if self.setup_group:
            kill_groups([self.setup_group], grace=0)
        kill_pod(self.job, self.pod, grace=0, children=self.children())
        record_ending(self.job, ended)
        shutil.rmtree(self.job.tmp, ignore_errors=True)

    def children(self) -> dict:
        return {}

    # -- folders

    def own(self, path: Path, mode: int = 0o755) -> None:
        path.chmod(mode)
        if self.uid is not None:
            os.chown(path, self.uid, self.gid)

    def prepare_folders(self) -> None:
        for folder in (self.job.logs, self.job.files):
            folder.mkdir(parents=True, exist_ok=True)
        for folder in (self.job.output, self.job.exits, self.job.code, self.tensorboard_dir):
            folder.mkdir(parents=True, exist_ok=True)
            self.own(folder)
        self.job.tmp.mkdir(exist_ok=True)
        self.own(self.job.tmp, 0o700)
        if not self.checkpoint_dir.is_dir():
            self.checkpoint_dir.mkdir(parents=True)
            self.own(self.checkpoint_dir)
        for rank in range(self.spec.workers):
            self.job.log_file(rank).touch()

    # -- setup

    def say(self, line: str) -> None:
        self.tee(f"[portal] {line}\n".encode())

    def tee(self, data: bytes) -> None:
        # Setup output goes to every worker's log, ahead of what the command will print there.
        for rank in range(self.spec.workers):
            with open(self.job.log_file(rank), "ab") as log:
                log.write(data)

    def check_cancel(self) -> None:
        if self.job.cancel_file.exists():
            raise Ended(CANCELLED, "cancelled", "cancelled on request before the command started")

    def check_setup_time(self) -> None:
        if time.time() > self.setup_deadline:
            raise Ended(FAILED, "setup_timeout",
                        f"setting up the job (fetching the code and building its environment) took longer than the "
                        f"cluster's setup_timeout_seconds ({self.spec.setup_timeout_seconds} s) and was stopped")

    def checkpoint(self) -> None:
        self.check_cancel()
        self.check_setup_time()

    def system_binds(self) -> list[sandbox.Bind]:
        prefix = str(Path(os.path.realpath(self.python)).parent.parent)
        return [sandbox.Bind(prefix, prefix), *(sandbox.Bind(p, p) for p in self.launch.get("extra_ro_paths", []))]

    def setup_box(self, argv, *, cwd: str, binds: list[sandbox.Bind], env: dict, network: bool, uid=None) -> sandbox.Sandbox:
        uid = self.uid if uid is None else uid
        return sandbox.Sandbox(
            argv=argv, cwd=cwd, env=env, binds=(*self.system_binds(), sandbox.Bind(str(self.job.tmp), "/tmp", True), *binds),
            uid=uid, gid=self.gid, network=network, die_with_parent=True,
            # The repository it clones is owned by someone else (git's "dubious ownership"); in the sandbox only it
            # and the code folder are there to be trusted or not. A system file, since git drops -c settings and
            # GIT_CONFIG_* before it runs upload-pack for a local clone.
            files=(*self.sandbox_files(), ("/etc/gitconfig", "[safe]\n\tdirectory = *\n")),
        )

    def sandbox_files(self) -> tuple[tuple[str, str], ...]:
        files = (("/etc/resolv.conf", f"nameserver {sandbox.DNS}\n"),)
        if self.uid is not None:
            files += sandbox.passwd_files(self.uid, self.gid, "/tmp")
        return files

    def setup_step(self, argv: list[str], *, cwd: str, binds=(), env=None, network=False) -> tuple[int, str]:
        """Run a setup command with its output streamed into the logs; a cancel or the setup deadline stops it."""
        env = {**inherited_env(sandboxed=self.sandboxed), **(env or {})}
        if self.sandboxed:
            box = self.setup_box(argv, cwd=cwd, binds=list(binds), env=env, network=network)
            try:
                started = sandbox.start(box, files_dir=self.job.files, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            except sandbox.SandboxError as exc:
                raise Ended(FAILED, "sandbox_failed", f"the job's sandbox could not be set up: {exc}") from None
            proc = started.proc
        else:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        output = b""
        with proc, selectors.DefaultSelector() as selector:
            self.setup_group = {"pgid": proc.pid, "starttime": start_time(proc.pid)}
            write_json(self.job.groups_file, {"setup": self.setup_group, "pod": None})
            selector.register(proc.stdout, selectors.EVENT_READ)
            exited = False
            while True:
                # Once the command has exited, only read what is already there: something it started may
                # still hold the pipe open.
                if selector.select(timeout=0 if exited else TICK):
                    chunk = os.read(proc.stdout.fileno(), 65536)
                    if not chunk:
                        break
                    self.tee(chunk)
                    output = (output + chunk)[-64 * 1024:]
                elif exited:
                    break
                exited = exited or proc.poll() is not None
                if self.job.cancel_file.exists() or time.time() > self.setup_deadline:
                    kill_groups([self.setup_group], grace=0)
                    self.checkpoint()
            code = proc.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # anything it left behind
        self.setup_group = None
        text = output.decode("utf-8", "replace").strip()
        return code, "\n".join(text.splitlines()[-TAIL_LINES:])

    def fetch_code(self) -> str:
        ref = self.spec.commit or self.spec.code_ref  # a re-run (after preemption) keeps the commit it ran
        url = self.spec.code_url
        self.say(f"fetching {url}" + (f" at {ref}" if ref else ""))
        local = self.launch.get("local_source")
        binds = [sandbox.Bind(str(self.job.code), CODE_AT, writable=True)]
        if self.sandboxed and local:
            if not os.path.isdir(local):
                raise Ended(FAILED, "clone_failed", f"fatal: repository '{url}' does not exist")
            # The sandbox sees the repository (and nothing else of this disk) at a path of its own.
            binds.append(sandbox.Bind(local, SOURCE_AT))
            url = SOURCE_AT
        code_at = CODE_AT if self.sandboxed else str(self.job.code)
        commit_file = self.job.tmp / ".portal-commit"
        # Trusted mode keeps the portal's git settings and SSH agent for private repositories; a sandboxed clone
        # gets neither (the agent's socket would hand the portal's keys to whatever runs next to git).
        env = {} if self.sandboxed else {k: v for k, v in os.environ.items() if k.startswith(("GIT_", "SSH_AUTH_SOCK"))}
        env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_SSH_COMMAND": os.environ.get("GIT_SSH_COMMAND", "ssh -o BatchMode=yes"),
                    "GIT_ALLOW_PROTOCOL": "https:http:ssh:git" + (":file" if self.launch["allow_local_code"] else "")})
        # One setup step for clone, checkout and the commit: each sandbox costs a start.
        code, output = self.setup_step(
            ["bash", "-c", FETCH, "portal-fetch", url, code_at, ref or "",
             "/tmp/.portal-commit" if self.sandboxed else str(commit_file)],
            cwd=code_at, binds=binds, env=env, network=local is None,
        )
        output = output.replace(SOURCE_AT, self.spec.code_url)
        commit = (read_small(commit_file) or "").strip()
        commit_file.unlink(missing_ok=True)
        if code != 0 or not re.fullmatch(r"[0-9a-f]{40,64}", commit):  # e.g. a repository without commits
            raise Ended(FAILED, "clone_failed", output or f"git failed with exit code {code}")
        self.say(f"code at commit {commit}")
        return commit

    def repository_requirements(self) -> list[str]:
        path = self.job.code / "requirements.txt"
        if not os.path.lexists(path):
            return []
        text = read_small(path, _MAX_REQUIREMENTS_FILE + 1)
        if text is None:
            raise Ended(FAILED, "install_failed", "the repository's requirements.txt must be a regular file "
                                                  "(not a symbolic link or anything else)")
        if len(text.encode()) > _MAX_REQUIREMENTS_FILE:
            raise Ended(FAILED, "install_failed", "the repository's requirements.txt is larger than 256 KiB")
        lines = venvs.requirement_lines(text)
        problems = requirement_problems(lines, allow_local_files=self.launch["allow_local_code"],
                                        allowed_indexes=self.launch.get("allowed_indexes", ()), where="requirements.txt ")
        if problems:
            raise Ended(FAILED, "install_failed", "the repository's requirements.txt cannot be installed:\n" + "\n".join(problems))
        return lines

    def environment(self) -> Path:
        lines = [*self.repository_requirements(), *self.spec.requirements, *self.spec.base_packages]
        department = re.sub(r"[^a-z0-9-]", "-", self.spec.department.lower()) or "default"
        envs = venvs.Envs(
            Path(self.launch["envs"]) / ("sandbox" if self.sandboxed else "host") / department,
            python=self.python, builder=_Builder(self), say=self.say, checkpoint=self.checkpoint,
            owner=(self.uid, self.gid) if self.uid is not None else None,
        )
        try:
            return envs.ensure(lines)
        except venvs.BuildFailed as exc:
            raise Ended(FAILED, "install_failed", exc.message) from None

    # -- workers

    def view(self, env_dir: Path) -> View:
        if self.sandboxed:
            return View(CODE_AT, OUTPUT_AT, TENSORBOARD_AT, CHECKPOINT_AT, venvs.ENV_AT, SANDBOX_MASTER_PORT,
                        {m.name: m.path for m in self.spec.mounts})
        return View(str(self.job.code), str(self.job.output), str(self.tensorboard_dir), str(self.checkpoint_dir),
                    str(env_dir), self.launch["master_port"], {m.name: m.source for m in self.spec.mounts})

    def start_workers(self, env_dir: Path) -> None:
        view = self.view(env_dir)
        gpus = tuple(sorted({g for w in self.placement.workers for g in w.gpus}))
        devices = sandbox.gpu_devices(gpus) if self.sandboxed else []
        per_node: dict[str, int] = {}
        plan, fds = [], []
        try:
            for placement in sorted(self.placement.workers, key=lambda w: w.worker):
                local_rank = per_node.get(placement.node, 0)
                per_node[placement.node] = local_rank + 1
                # With only its GPUs' device nodes in the sandbox, CUDA numbers them from 0.
                visible = ",".join(str(gpus.index(g)) for g in placement.gpus) if devices else None
                env = worker_env(self.spec, placement, local_rank=local_rank, view=view, launch=self.launch,
                                 sandboxed=self.sandboxed, visible_gpus=visible)
                fd = os.open(self.job.log_file(placement.worker), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
                fds.append(fd)
                plan.append({"rank": placement.worker, "command": self.spec.command, "env": env, "cwd": view.code,
                             "log_fd": fd})
            exit_dir = EXIT_AT if self.sandboxed else str(self.job.exits)
            write_json(self.job.workers_file, {"workers": plan, "exit_dir": exit_dir})
            launcher = [self.python, "-I", "-S"]
            if self.sandboxed:
                self.proc, self.pod = self._start_sandbox(launcher, view, env_dir, devices, tuple(fds))
            else:
                self.proc = subprocess.Popen(
                    [*launcher, str(LAUNCHER), str(self.job.workers_file)], cwd=view.code, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=tuple(fds), start_new_session=True,
                    env={"PATH": os.environ.get("PATH", os.defpath)},
                )
                self.pod = {"pid": self.proc.pid, "starttime": start_time(self.proc.pid), "started_at": start_time(self.proc.pid)}
        finally:
            for fd in fds:
                os.close(fd)
        write_json(self.job.groups_file, {"setup": None, "pod": self.pod})

    def _start_sandbox(self, launcher, view: View, env_dir: Path, devices: list[str], fds: tuple[int, ...]):
        Bind = sandbox.Bind
        binds = [
            *self.system_binds(),
            Bind(str(self.job.tmp), "/tmp", True),
            Bind(str(env_dir), view.env),
            Bind(str(self.job.code), CODE_AT, True),
            Bind(str(self.job.output), OUTPUT_AT, True),
            Bind(str(self.tensorboard_dir), TENSORBOARD_AT, True),
            Bind(str(self.checkpoint_dir), CHECKPOINT_AT, True),
            Bind(str(self.job.exits), EXIT_AT, True),
            Bind(str(LAUNCHER), LAUNCHER_AT),
            Bind(str(self.job.workers_file), WORKERS_AT),
            *(Bind(m.source, m.path, writable=not m.read_only) for m in self.spec.mounts),
        ]
        groups = tuple(sorted({os.stat(node).st_gid for node in devices if os.stat(node).st_gid != 0}))
        box = sandbox.Sandbox(
            argv=[*launcher, LAUNCHER_AT, WORKERS_AT], cwd=CODE_AT, env={"PATH": _SANDBOX_PATH}, binds=tuple(binds),
            uid=self.uid, gid=self.gid, groups=groups, network=True,
            gpus=tuple(sorted({g for w in self.placement.workers for g in w.gpus})), files=self.sandbox_files(),
            as_pid_1=True,
        )
        try:
            with open(self.job.runner_log, "ab") as log:
                started = sandbox.start(box, files_dir=self.job.files, stdout=log, stderr=log, pass_fds=fds)
        except sandbox.SandboxError as exc:
            raise Ended(FAILED, "sandbox_failed", f"the job's sandbox could not be set up: {exc}") from None
        return started.proc, {"pid": started.pid, "starttime": start_time(started.pid), "net": started.net_pid}

    def watch(self) -> Ended:
        started_at = self.job.state()["started_at"]
        limit = self.spec.max_runtime_seconds
        while True:
            self.look_at_workers()
            ended = judge(self.job, self.workers, deadline_passed=limit is not None and time.time() > started_at + limit)
            if ended is not None:
                break
            time.sleep(TICK)
        if ended.phase == CANCELLED:
            grace = float((self.job.cancel_request() or {}).get("grace_seconds", self.spec.grace_seconds))
        elif ended.phase == FAILED:
            grace = self.spec.grace_seconds
        else:
            grace = 0  # all exited 0: only leftovers remain
        kill_pod(self.job, self.pod, grace=grace)
        return ended

    def look_at_workers(self) -> None:
        if self.proc is not None:
            self.proc.poll()
        reap()
        pod_alive = _pod_alive(self.pod)
        for worker in self.workers:
            if worker.done:
                continue
            worker.code = self.job.exit_code(worker.rank)
            # The launcher writes an exit file for every worker before it exits, so a gone sandbox with no
            # file means the worker was killed with it.
            if worker.code is None and not pod_alive:
                worker.code = self.job.exit_code(worker.rank)
                worker.gone = worker.code is None


class _Builder:
    """Environment builds for venvs.Envs: a build sandbox of their own (or plain processes in trusted mode)."""

    def __init__(self, runner: Runner):
        self.runner = runner
        self.sandboxed = runner.sandboxed

    def run(self, argv: list[str], *, binds: list[sandbox.Bind], env: dict[str, str]) -> tuple[int, str]:
        runner = self.runner
        # The build runs package build code: none of the portal's git or SSH settings, nothing of the job's folders.
        clean = {k: v for k, v in env.items()}
        if not runner.sandboxed:
            return runner.setup_step(argv, cwd=str(runner.job.path), env=clean)
        return runner.setup_step(argv, cwd="/tmp", binds=binds, env=clean, network=True)


# ----------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.executors.local_runner")
    parser.add_argument("job_dir", type=Path)
    parser.add_argument("--lock-fd", type=int, required=True, help="an open fd of runner.lock, locked by the caller")
    parser.add_argument("--adopt", action="store_true", help="take over the workers of a runner that died")
    args = parser.parse_args(argv)

    os.set_inheritable(args.lock_fd, False)  # workers must not keep the runner "alive"
    with contextlib.suppress(PermissionError):
        os.setsid()
    # Started in the background by sh, which makes us ignore these; the workers must not inherit that.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    become_subreaper()

    job = JobDir(args.job_dir.resolve())
    mode = "adopt" if args.adopt else "run"
    write_json(job.runner_file, {"pid": os.getpid(), "starttime": start_time(os.getpid()), "mode": mode})
    runner = None
    try:
        runner = Runner(job)
        ended = runner.adopt() if args.adopt else runner.run()
    except Ended as exc:
        ended = exc
    except BaseException as exc:  # noqa: BLE001 - a job is never left running with nobody behind it
        traceback.print_exc()
        ended = Ended(FAILED, "executor_error", f"the job's supervisor failed: {exc!r}")
    if runner is not None:
        runner.finish(ended)
    else:
        record_ending(job, ended)
    return 0


if __name__ == "__main__":
    sys.exit(main())
