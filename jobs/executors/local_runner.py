"""The supervisor of one local job: ``python -m jobs.executors.local_runner <job_dir> --lock-fd N [--adopt]``.

Owns everything that happens to a job after LocalExecutor.launch(): fetching the code with git, getting its
virtualenv, starting its workers, and ending the job (success, a failed worker, cancel, deadline, setup
timeout), with every phase recorded in state.json. This module is the supervisor loop (start the workers,
watch them, end the job); the setup steps before it (fetch, requirements, environment) are local_setup.py's,
how a job ends (judging exits, killing the sandbox, recording the ending) local_endings.py's, the environment
each worker gets (the job environment contract) local_env.py's. The layout of a job directory (JobDir) is in
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
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from clusters import sandbox, sandbox_start
from clusters.local_procs import TICK, become_subreaper, kill_groups, reap, start_time
from jobs.executors import venvs
from jobs.executors.base import (
    CANCELLED,
    FAILED,
    RUNNING,
)
from jobs.executors.local_disk import DiskWatch
from jobs.executors.local_endings import (
    Ended,
    Worker,
    is_pod_alive,
    judge,
    kill_pod,
    record_ending,
)
from jobs.executors.local_env import (
    CHECKPOINT_AT,
    OUTPUT_AT,
    SANDBOX_MASTER_PORT,
    TENSORBOARD_AT,
    View,
    worker_env,
)
from jobs.executors.local_jobdir import (
    JobDir,
    placement_from_dict,
    read_json,
    spec_from_dict,
    write_json,
)
from jobs.executors.local_setup import CODE_AT, SANDBOX_PATH, SetupSteps

LAUNCHER = Path(__file__).with_name("sandbox_init.py")

EXIT_AT, WORKERS_AT, LAUNCHER_AT = "/portal/exit", "/portal/workers.json", "/portal/init.py"


# --------------------------------------------------------------------------------------------- runner


class Runner(SetupSteps):
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
        self.job.write_state(env=str(env_dir))  # in use: the executor's env eviction leaves it alone
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
        # Setup output goes to every worker's log, ahead of what the command will print there; past the log's cap
        # it is dropped (the launcher says the log was cut once the command prints).
        cap = self.launch.get("log_max_bytes")
        for rank in range(self.spec.workers):
            with open(self.job.log_file(rank), "ab") as log:
                room = len(data) if cap is None else max(0, cap - log.tell())
                log.write(data[:room])

    def check_cancel(self) -> None:
        if self.job.cancel_file.exists():
            raise Ended(CANCELLED, "cancelled", "cancelled on request before the command started")

    def check_setup_time(self) -> None:
        if time.time() > self.setup_deadline:
            raise Ended(
                FAILED,
                "setup_timeout",
                f"setting up the job (fetching the code and building its environment) took longer than the "
                f"cluster's setup_timeout_seconds ({self.spec.setup_timeout_seconds} s) and was stopped",
            )

    def checkpoint(self) -> None:
        self.check_cancel()
        self.check_setup_time()

    # -- workers

    def view(self, env_dir: Path) -> View:
        if self.sandboxed:
            return View(
                CODE_AT,
                OUTPUT_AT,
                TENSORBOARD_AT,
                CHECKPOINT_AT,
                venvs.ENV_AT,
                SANDBOX_MASTER_PORT,
                {m.name: m.path for m in self.spec.mounts},
            )
        return View(
            str(self.job.code),
            str(self.job.output),
            str(self.tensorboard_dir),
            str(self.checkpoint_dir),
            str(env_dir),
            self.launch["master_port"],
            {m.name: m.source for m in self.spec.mounts},
        )

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
                env = worker_env(
                    self.spec,
                    placement,
                    local_rank=local_rank,
                    view=view,
                    launch=self.launch,
                    sandboxed=self.sandboxed,
                    visible_gpus=visible,
                )
                fd = os.open(
                    self.job.log_file(placement.worker), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
                )
                fds.append(fd)
                plan.append(
                    {"rank": placement.worker, "command": self.spec.command, "env": env, "cwd": view.code, "log_fd": fd}
                )
            exit_dir = EXIT_AT if self.sandboxed else str(self.job.exits)
            write_json(
                self.job.workers_file,
                {"workers": plan, "exit_dir": exit_dir, "log_max_bytes": self.launch.get("log_max_bytes")},
            )
            launcher = [self.python, "-I", "-S"]
            if self.sandboxed:
                self.proc, self.pod = self._start_sandbox(launcher, view, env_dir, devices, tuple(fds))
            else:
                self.proc = subprocess.Popen(
                    [*launcher, str(LAUNCHER), str(self.job.workers_file)],
                    cwd=view.code,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    pass_fds=tuple(fds),
                    start_new_session=True,
                    env={"PATH": os.environ.get("PATH", os.defpath)},
                )
                self.pod = {
                    "pid": self.proc.pid,
                    "starttime": start_time(self.proc.pid),
                    "started_at": start_time(self.proc.pid),
                }
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
            argv=[*launcher, LAUNCHER_AT, WORKERS_AT],
            cwd=CODE_AT,
            env={"PATH": SANDBOX_PATH},
            binds=tuple(binds),
            uid=self.uid,
            gid=self.gid,
            groups=groups,
            network=True,
            gpus=tuple(sorted({g for w in self.placement.workers for g in w.gpus})),
            files=self.sandbox_files(),
            as_pid_1=True,
        )
        try:
            with open(self.job.runner_log, "ab") as log:
                started = sandbox_start.start(box, files_dir=self.job.files, stdout=log, stderr=log, pass_fds=fds)
        except sandbox.SandboxError as exc:
            raise Ended(FAILED, "sandbox_failed", f"the job's sandbox could not be set up: {exc}") from None
        return started.proc, {"pid": started.pid, "starttime": start_time(started.pid), "net": started.net_pid}

    def watch(self) -> Ended:
        started_at = self.job.state()["started_at"]
        limit = self.spec.max_runtime_seconds
        disk = DiskWatch(
            (self.job.code, self.job.output, self.job.tmp, self.job.exits, self.checkpoint_dir, self.tensorboard_dir),
            self.launch.get("disk_max_bytes"),
        )
        while True:
            self.look_at_workers()
            ended = judge(
                self.job, self.workers, deadline_passed=limit is not None and time.time() > started_at + limit
            )
            if ended is None and (over := disk.check()):
                ended = Ended(FAILED, "disk_limit_exceeded", over)
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
        pod_alive = is_pod_alive(self.pod)
        for worker in self.workers:
            if worker.done:
                continue
            worker.code = self.job.exit_code(worker.rank)
            # The launcher writes an exit file for every worker before it exits, so a gone sandbox with no
            # file means the worker was killed with it.
            if worker.code is None and not pod_alive:
                worker.code = self.job.exit_code(worker.rank)
                worker.gone = worker.code is None


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
