"""The setup steps of a local job, before its workers start (local_runner.py's Runner runs them as SetupSteps):
fetching the code with git (FETCH, one setup step for clone, checkout and the commit), reading the
repository's requirements.txt and getting the job's virtualenv (venvs.Envs, built by _Builder), each step a
command whose output goes to the job's logs and which a cancel or the setup deadline stops (setup_step), in
a setup sandbox when the job is sandboxed. Also what jobs inherit from the host's environment (inherited_env).
The supervisor loop (starting and watching the workers, ending the job) stays in local_runner.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from clusters import sandbox, sandbox_start
from clusters.local_procs import TICK, kill_groups, start_time
from core.code_url import GIT_ALLOW_PROTOCOL
from core.requirements import requirement_problems
from jobs.executors import venvs
from jobs.executors.base import FAILED
from jobs.executors.local_endings import Ended
from jobs.executors.local_jobdir import TAIL_LINES, read_small, write_json

if TYPE_CHECKING:
    from jobs.executors.base import JobSpec
    from jobs.executors.local_jobdir import JobDir

# What jobs inherit from the host: the portal's own settings (database URL, secrets) stay out.
_INHERITED = {
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
}
_INHERITED_PREFIXES = ("LC_",)
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_MAX_REQUIREMENTS_FILE = 256 * 1024

# Where a sandboxed job finds its code (its other folders are in local_runner.py).
CODE_AT = "/portal/code"
SOURCE_AT = "/portal/source"  # a repository on this host's disk (clusters that allow local code)
# Clone "$1" into "$2", check out "$3" if given, write the commit to "$4". `--` makes a ref that is also a file
# name mean the ref; git still turns a remote branch name into a local branch.
FETCH = (
    'git clone --quiet -- "$1" "$2" && cd "$2" && { [ -z "$3" ] || git checkout --quiet "$3" --; } '
    '&& git rev-parse --verify HEAD > "$4"'
)  # the sandbox has a network namespace of its own: any port is free


def inherited_env(*, sandboxed: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _INHERITED or k.startswith(_INHERITED_PREFIXES)}
    if sandboxed:
        # Paths of the host mean nothing inside, and the job's HOME is its own /tmp.
        env = {
            k: v for k, v in env.items() if k not in {"PATH", "HOME", "TMPDIR", "LD_LIBRARY_PATH", "USER", "LOGNAME"}
        }
        env.update(PATH=SANDBOX_PATH, HOME="/tmp", TMPDIR="/tmp", USER="job", LOGNAME="job")
    return env


class SetupSteps:
    """The setup steps of Runner (local_runner.py), which holds the job and says, tees and checks."""

    job: JobDir
    launch: dict
    spec: JobSpec
    sandboxed: bool
    uid: int | None
    gid: int | None
    python: str
    setup_group: dict | None
    setup_deadline: float

    def say(self, line: str) -> None:
        raise NotImplementedError

    def tee(self, data: bytes) -> None:
        raise NotImplementedError

    def checkpoint(self) -> None:
        raise NotImplementedError

    def system_binds(self) -> list[sandbox.Bind]:
        prefix = str(Path(os.path.realpath(self.python)).parent.parent)
        return [sandbox.Bind(prefix, prefix), *(sandbox.Bind(p, p) for p in self.launch.get("extra_ro_paths", []))]

    def setup_box(
        self, argv, *, cwd: str, binds: list[sandbox.Bind], env: dict, network: bool, uid=None
    ) -> sandbox.Sandbox:
        uid = self.uid if uid is None else uid
        return sandbox.Sandbox(
            argv=argv,
            cwd=cwd,
            env=env,
            binds=(*self.system_binds(), sandbox.Bind(str(self.job.tmp), "/tmp", True), *binds),
            uid=uid,
            gid=self.gid,
            network=network,
            die_with_parent=True,
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
                started = sandbox_start.start(
                    box, files_dir=self.job.files, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
                )
            except sandbox.SandboxError as exc:
                raise Ended(FAILED, "sandbox_failed", f"the job's sandbox could not be set up: {exc}") from None
            proc = started.proc
        else:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
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
                    output = (output + chunk)[-64 * 1024 :]
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
        env.update(
            {
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_SSH_COMMAND": os.environ.get("GIT_SSH_COMMAND", "ssh -o BatchMode=yes"),
                "GIT_ALLOW_PROTOCOL": GIT_ALLOW_PROTOCOL + (":file" if self.launch["allow_local_code"] else ""),
            }
        )
        # One setup step for clone, checkout and the commit: each sandbox costs a start.
        code, output = self.setup_step(
            [
                "bash",
                "-c",
                FETCH,
                "portal-fetch",
                url,
                code_at,
                ref or "",
                "/tmp/.portal-commit" if self.sandboxed else str(commit_file),
            ],
            cwd=code_at,
            binds=binds,
            env=env,
            network=local is None,
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
            raise Ended(
                FAILED,
                "install_failed",
                "the repository's requirements.txt must be a regular file (not a symbolic link or anything else)",
            )
        if len(text.encode()) > _MAX_REQUIREMENTS_FILE:
            raise Ended(FAILED, "install_failed", "the repository's requirements.txt is larger than 256 KiB")
        lines = venvs.requirement_lines(text)
        problems = requirement_problems(
            lines,
            allow_local_files=self.launch["allow_local_code"],
            allowed_indexes=self.launch.get("allowed_indexes", ()),
            where="requirements.txt ",
        )
        if problems:
            raise Ended(
                FAILED,
                "install_failed",
                "the repository's requirements.txt cannot be installed:\n" + "\n".join(problems),
            )
        return lines

    def environment(self) -> Path:
        lines = [*self.repository_requirements(), *self.spec.requirements, *self.spec.base_packages]
        department = re.sub(r"[^a-z0-9-]", "-", self.spec.department.lower()) or "default"
        envs = venvs.Envs(
            Path(self.launch["envs"]) / ("sandbox" if self.sandboxed else "host") / department,
            python=self.python,
            builder=_Builder(self),
            say=self.say,
            checkpoint=self.checkpoint,
            owner=(self.uid, self.gid) if self.uid is not None else None,
        )
        try:
            return envs.ensure(lines)
        except venvs.BuildFailed as exc:
            raise Ended(FAILED, "install_failed", exc.message) from None


class _Builder:
    """Environment builds for venvs.Envs: a build sandbox of their own (or plain processes in trusted mode)."""

    def __init__(self, runner: SetupSteps):
        self.runner = runner
        self.sandboxed = runner.sandboxed

    def run(self, argv: list[str], *, binds: list[sandbox.Bind], env: dict[str, str]) -> tuple[int, str]:
        runner = self.runner
        # The build runs package build code: none of the portal's git or SSH settings, nothing of the job's folders.
        clean = {k: v for k, v in env.items()}
        if not runner.sandboxed:
            return runner.setup_step(argv, cwd=str(runner.job.path), env=clean)
        return runner.setup_step(argv, cwd="/tmp", binds=binds, env=clean, network=True)
