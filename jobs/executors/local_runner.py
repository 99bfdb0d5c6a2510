"""The supervisor of one local job: ``python -m jobs.executors.local_runner <job_dir> --lock-fd N [--adopt]``.

Owns everything that happens to a job after LocalExecutor.launch(): fetching the code with git, getting
its virtualenv, running one process group per worker with the job environment, and ending the job
(success, a failed worker, cancel, deadline), with every phase recorded in state.json. The layout of a
job directory (JobDir) is in local_jobdir.py, the process bookkeeping LocalExecutor reads (process
groups, PID-reuse checks, kills) in local_procs.py.

A runner holds an flock on runner.lock for its whole life, handed over by whoever started it; a lock
that can be taken means no runner is alive (immune to PID reuse, released even on SIGKILL). With
--adopt it takes over the workers of a runner that died, which it cannot wait() on: it watches their
process groups and reads the exit code each worker's wrapper shell writes to a file.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from jobs.executors import venvs
from jobs.executors.base import CANCELLED, FAILED, FINAL_PHASES, LOST, RUNNING, SUCCEEDED, JobSpec, WorkerPlacement
from jobs.executors.local_jobdir import TAIL_LINES, JobDir, placement_from_dict, read_json, spec_from_dict, write_json
from jobs.executors.local_procs import (
    TICK, alive, become_subreaper, kill_groups, live_groups, ours, reap, signal_group, start_time,
)

# Runs the user command and records its exit code, so that an adopting runner (not the parent) can
# learn it. Trapping TERM (rather than ignoring it) keeps this shell alive until the command has
# reacted, while the command itself gets default signal handling.
WRAPPER = 'trap : TERM INT HUP; bash -c "$1"; code=$?; echo "$code" > "$2"; exit "$code"'

RESERVED = (
    "PORTAL_JOB_ID", "PORTAL_JOB_NAME", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
    "TF_CONFIG", "CUDA_VISIBLE_DEVICES", "PORTAL_GPU_FRACTION", "TENSORBOARD_LOG_DIR", "PORTAL_OUTPUT_DIR",
    "VIRTUAL_ENV", "PYTHONUNBUFFERED",
)

# What jobs inherit from the host: the portal's own settings (database URL, secrets) stay out.
_INHERITED = {
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH", "CUDA_HOME",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "http_proxy", "https_proxy", "no_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
}
_INHERITED_PREFIXES = ("LC_",)
_SETUP_PREFIXES = ("PIP_", "GIT_", "SSH_AUTH_SOCK")  # git and pip configuration, for setup steps only


def inherited_env(*, setup: bool = False) -> dict[str, str]:
    prefixes = _INHERITED_PREFIXES + (_SETUP_PREFIXES if setup else ())
    return {k: v for k, v in os.environ.items() if k in _INHERITED or k.startswith(prefixes)}


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
    pgid: int
    starttime: int | None
    proc: subprocess.Popen | None = None  # None for adopted workers
    code: int | None = None  # exit code once known; negative = killed by that signal
    gone: bool = False  # ended without an exit code (an adopted worker that was SIGKILLed)

    @property
    def done(self) -> bool:
        return self.code is not None or self.gone

    def group(self) -> dict:
        return {"pgid": self.pgid, "starttime": self.starttime}


def worker_failure(job: JobDir, worker: Worker) -> Ended:
    if worker.gone:
        what, exit_code = "ended without an exit code (it was killed)", None
    elif worker.code < 0:
        what, exit_code = f"was killed by signal {-worker.code}", 128 - worker.code
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


def conclude_unsupervised(job: JobDir) -> dict | None:
    """For a job whose runner is dead (the caller holds runner.lock): end it, or None to adopt it.

    Adoptable: running, with a worker group alive. Otherwise whatever is left is killed and the job
    ends from its exit files if every worker wrote one, as cancelled if that was asked, else as lost.
    """
    state = job.state()
    if state is None or state.get("phase") in FINAL_PHASES:
        return state
    recorded = job.groups()
    live = live_groups()
    worker_groups = {int(rank): group for rank, group in recorded["workers"].items()}
    if state.get("phase") == RUNNING and any(ours(g, live) for g in worker_groups.values()):
        return None
    kill_groups([*worker_groups.values(), *filter(None, [recorded.get("setup")])], grace=0)
    # A running job has every worker recorded (they are all spawned before the phase changes).
    workers = [Worker(rank, 0, None, code=job.exit_code(rank)) for rank in sorted(worker_groups)]
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


def worker_env(
    spec: JobSpec, placement: WorkerPlacement, *, local_rank: int, job: JobDir, env_dir: Path, launch: dict,
) -> dict[str, str]:
    """The job environment contract (DESIGN.md), as one worker sees it."""
    env = inherited_env()
    env.update({k: v for k, v in spec.env.items() if k not in RESERVED})
    env.update({
        "PORTAL_JOB_ID": spec.job_id,
        "PORTAL_JOB_NAME": spec.name,
        "WORLD_SIZE": str(spec.workers),
        "RANK": str(placement.worker),
        "LOCAL_RANK": str(local_rank),
        "MASTER_ADDR": launch["master_addr"],
        "MASTER_PORT": str(launch["master_port"]),
        "CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in placement.gpus),
        "TENSORBOARD_LOG_DIR": str(job.tensorboard),
        "PORTAL_OUTPUT_DIR": str(job.output),
        "VIRTUAL_ENV": str(env_dir),
        "PATH": f"{env_dir / 'bin'}:{_without_portal_venv(env.get('PATH') or os.defpath)}",
        "PYTHONUNBUFFERED": "1",
    })
    for mount in spec.mounts:
        env["PORTAL_DATA_" + re.sub(r"[^A-Z0-9]", "_", mount.name.upper())] = mount.source
    if placement.gpu_fraction is not None:
        env["PORTAL_GPU_FRACTION"] = str(placement.gpu_fraction)
    if spec.framework == "tensorflow":
        hosts = [f"{launch['master_addr']}:{port}" for port in launch["tf_ports"]]
        env["TF_CONFIG"] = json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": placement.worker}})
    return env


class Runner:
    def __init__(self, job: JobDir):
        self.job = job
        self.launch = read_json(job.launch_file)
        self.spec = spec_from_dict(self.launch["job"])
        self.placement = placement_from_dict(self.launch["placement"])
        self.workers: list[Worker] = []
        self.setup_group: dict | None = None

    # -- the whole life of a job

    def run(self) -> Ended:
        for folder in (self.job.output, self.job.tensorboard, self.job.logs, self.job.exits):
            folder.mkdir(parents=True, exist_ok=True)
        self.check_cancel()
        commit = self.fetch_code()
        self.job.write_state(commit=commit)
        env_dir = self.environment()
        self.check_cancel()
        self.spawn_workers(env_dir)
        self.job.write_state(phase=RUNNING, started_at=time.time())
        return self.watch(adopted=False)

    def adopt(self) -> Ended:
        groups = self.job.groups()["workers"]
        self.workers = [Worker(int(rank), g["pgid"], g["starttime"]) for rank, g in sorted(groups.items())]
        return self.watch(adopted=True)

    def finish(self, ended: Ended) -> None:
        # Nothing of the job outlives its ending: that is what releases its GPUs.
        groups = [w.group() for w in self.workers] + ([self.setup_group] if self.setup_group else [])
        kill_groups(groups, grace=0, children=self.children())
        record_ending(self.job, ended)

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

    def setup_step(self, argv: list[str], *, cwd: Path | None = None) -> tuple[int, str]:
        """Run a setup command with its output streamed into the logs; a cancel stops it."""
        env = {**inherited_env(setup=True), "GIT_TERMINAL_PROMPT": "0", "PIP_NO_INPUT": "1"}
        env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
        env["GIT_ALLOW_PROTOCOL"] = "https:http:ssh:git" + (":file" if self.launch["allow_local_code"] else "")
        tail = b""
        with subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        ) as proc, selectors.DefaultSelector() as selector:
            self.setup_group = {"pgid": proc.pid, "starttime": start_time(proc.pid)}
            write_json(self.job.groups_file, {"setup": self.setup_group, "workers": {}})
            selector.register(proc.stdout, selectors.EVENT_READ)
            exited = False
            while True:
                # Once the command has exited, only read what is already there: something it
                # started may still hold the pipe open.
                if selector.select(timeout=0 if exited else TICK):
                    chunk = os.read(proc.stdout.fileno(), 65536)
                    if not chunk:
                        break
                    self.tee(chunk)
                    tail = (tail + chunk)[-64 * 1024:]
                elif exited:
                    break
                exited = exited or proc.poll() is not None
                if self.job.cancel_file.exists():
                    kill_groups([self.setup_group], grace=0)
                    self.check_cancel()
            code = proc.wait()
            signal_group(proc.pid, signal.SIGKILL)  # anything it left behind
        lines = tail.decode("utf-8", "replace").strip().splitlines()
        return code, "\n".join(lines[-TAIL_LINES:])

    def fetch_code(self) -> str:
        ref = self.spec.commit or self.spec.code_ref  # a re-run (after preemption) keeps the commit it ran
        self.say(f"fetching {self.spec.code_url}" + (f" at {ref}" if ref else ""))
        code, output = self.setup_step(["git", "clone", "--quiet", "--", self.spec.code_url, str(self.job.code)])
        if code == 0 and ref:
            # `--` makes a ref that is also a file name mean the ref; git still turns a remote branch
            # name into a local branch.
            code, output = self.setup_step(["git", "checkout", "--quiet", ref, "--"], cwd=self.job.code)
        if code != 0:
            raise Ended(FAILED, "clone_failed", output or f"git failed with exit code {code}")
        head = subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=self.job.code, capture_output=True, text=True)
        if head.returncode != 0:  # e.g. a repository without commits
            raise Ended(FAILED, "clone_failed", head.stderr.strip() or "the repository has no commit to run")
        commit = head.stdout.strip()
        self.say(f"code at commit {commit}")
        return commit

    def environment(self) -> Path:
        repo_requirements = self.job.code / "requirements.txt"
        lines = venvs.requirement_lines(repo_requirements.read_text()) if repo_requirements.is_file() else []
        lines += [*self.spec.requirements, *self.spec.base_packages]
        try:
            return venvs.ensure(
                Path(self.launch["envs"]), python=self.launch["python"], requirements=lines,
                run=self.setup_step, say=self.say, checkpoint=self.check_cancel,
            )
        except venvs.BuildFailed as exc:
            raise Ended(FAILED, "install_failed", exc.message) from None

    # -- workers

    def spawn_workers(self, env_dir: Path) -> None:
        per_node: dict[str, int] = {}
        self.setup_group = None
        for placement in sorted(self.placement.workers, key=lambda w: w.worker):
            local_rank = per_node.get(placement.node, 0)
            per_node[placement.node] = local_rank + 1
            env = worker_env(self.spec, placement, local_rank=local_rank, job=self.job, env_dir=env_dir, launch=self.launch)
            argv = ["bash", "-c", WRAPPER, "portal-worker", self.spec.command, str(self.job.exit_file(placement.worker))]
            with open(self.job.log_file(placement.worker), "ab") as log:
                proc = subprocess.Popen(
                    argv, cwd=self.job.code, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.workers.append(Worker(placement.worker, proc.pid, start_time(proc.pid), proc))
            # Recorded one by one, so that a runner dying mid-way leaves no worker unknown.
            write_json(self.job.groups_file, {"setup": None, "workers": {str(w.rank): w.group() for w in self.workers}})

    def children(self) -> dict[int, Worker]:
        return {w.pgid: w for w in self.workers if w.proc is not None}

    def watch(self, *, adopted: bool) -> Ended:
        started_at = self.job.state()["started_at"]
        limit = self.spec.max_runtime_seconds
        while True:
            if adopted:
                self.look_at_adopted()
            else:
                reap(self.children())
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
        kill_groups([w.group() for w in self.workers], grace=grace, children=self.children())
        return ended

    def look_at_adopted(self) -> None:
        for worker in self.workers:
            if worker.done:
                continue
            worker.code = self.job.exit_code(worker.rank)
            # The wrapper writes its exit file before it exits, so a gone leader with no file was killed.
            if worker.code is None and not alive(worker.pgid, worker.starttime):
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
