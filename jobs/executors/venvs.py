"""The virtualenv cache of the local executor: one env per department and resolved requirement set, built once.

Owns ``<root>/envs/<department>/``: resolving a job's requirement lines to exact versions (``uv pip compile``,
remembered for ``resolve_ttl`` seconds, so ``torch>=2`` means the newest torch of today, not of the first build),
the cache key (the interpreter and the *resolved* set), the per-key build lock, and building the env with uv
(``uv venv`` + ``uv pip install``), or with ``python -m venv`` + pip where uv is missing.

Builds run through the caller's ``Builder``: on a sandboxed executor a build sandbox of its own (the
department's uid, the network, nothing of the portal, never a job's sandbox) that sees the env at ``/portal/env``;
jobs then get the finished env mounted read-only at that same path, so the absolute paths uv writes into its
scripts hold. Envs are per department: a build runs the build code of packages the department chose, and what
it leaves in its cache or env must never reach another department's jobs.
It knows nothing about jobs: the runner passes in how to run a step, where its lines go and how to give up.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from clusters.sandbox import Bind

# Written last: an env without it is a build that died half-way and is never used.
COMPLETE = ".portal-complete"
ENV_AT = "/portal/env"  # where a sandboxed env lives, in its build sandbox and in every job's
WORK_AT = "/portal/build"  # the build's scratch folder (requirement files, resolution output)
CACHE_AT = "/portal/cache"  # the department's uv cache
RESOLVE_TTL = 24 * 3600

# pip's comment rule: '#' at the start of a line or after whitespace ('#' inside a URL is not a comment).
_COMMENT = re.compile(r"(^|\s)#.*$")

# What `pip install` says inside a job: its environment is shared and read-only.
PIP_SHIM = """#!/bin/sh
echo "GPU Portal: this job's Python environment is shared and read-only, so '$(basename "$0") $*' cannot change it." >&2
echo "Add the package to the job's requirements (or to the repository's requirements.txt) and submit the job again;" >&2
echo "the portal builds that environment once and reuses it. To install into a folder of the job's own instead:" >&2
echo "  python -m venv --system-site-packages /tmp/venv && /tmp/venv/bin/pip install ...   (needs pip in the image)" >&2
exit 1
"""


class BuildFailed(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Builder(Protocol):
    sandboxed: bool

    def run(self, argv: list[str], *, binds: list[Bind], env: dict[str, str]) -> tuple[int, str]:
        """Run one build step (exit code, last lines of its output); its output goes to the job's logs."""


def requirement_lines(text: str) -> list[str]:
    """The requirements of a requirements.txt, without comments and blank lines."""
    lines = (_COMMENT.sub("", line).strip() for line in text.splitlines())
    return [line for line in lines if line]


def normalize(line: str) -> str:
    """One spelling per requirement, so that ``Foo>=1`` and ``foo >= 1`` share an env."""
    try:
        requirement = Requirement(line)
    except InvalidRequirement:
        return " ".join(line.split())
    requirement.name = canonicalize_name(requirement.name)
    return str(requirement)


def normalized_set(lines: Iterable[str]) -> list[str]:
    return sorted({normalize(line) for line in lines if line.strip()})


def cache_key(python_version: str, requirements: list[str]) -> str:
    """sha256 over the interpreter version and the (resolved, or else normalized) sorted requirement set."""
    text = "\n".join([python_version.strip(), *normalized_set(requirements)])
    return hashlib.sha256(text.encode()).hexdigest()


def python_version(python: str) -> str:
    if os.path.realpath(python) == os.path.realpath(getattr(sys, "_base_executable", sys.executable)):
        return sys.version
    done = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise BuildFailed(f"{python} does not run: {done.stderr.strip()}")
    return done.stdout


def find_uv() -> str | None:
    try:
        from uv import find_uv_bin
    except ImportError:
        return shutil.which("uv")
    try:
        return find_uv_bin()
    except FileNotFoundError:
        return shutil.which("uv")


def local_files(lines: Iterable[str]) -> list[str]:
    """Paths of ``file://`` direct references (allowed only on clusters that run local code)."""
    paths = []
    for line in lines:
        try:
            url = Requirement(line).url
        except InvalidRequirement:
            continue
        if url and url.lower().startswith("file://"):
            paths.append(url[len("file://") :])
    return paths


def sandbox_path(host: str) -> str:
    return f"/portal/files/{hashlib.sha256(host.encode()).hexdigest()[:12]}/{os.path.basename(host)}"


class Envs:
    """The envs of one department under ``root``."""

    def __init__(
        self,
        root: Path,
        *,
        python: str,
        builder: Builder,
        say: Callable[[str], None],
        checkpoint: Callable[[], None],
        uv: str | None = None,
        resolve_ttl: float = RESOLVE_TTL,
        owner: tuple[int, int] | None = None,
    ):
        self.root = root
        self.python = python
        self.builder = builder
        self.say = say
        self.checkpoint = checkpoint
        self.uv = uv if uv is not None else find_uv()
        self.resolve_ttl = resolve_ttl
        self.owner = owner  # (uid, gid) the build runs as: it owns the env, the cache and the scratch folders
        self.files: dict[str, str] = {}  # host path -> sandbox path of file:// requirements

    def ensure(self, requirements: list[str]) -> Path:
        """The env for ``requirements``, built now if no job of the department built it before.

        ``checkpoint`` is called while waiting for another job's build of the same set; it raises to give up
        (a cancel, the setup deadline). Raises BuildFailed when resolving or installing fails; a failed build
        leaves nothing behind.
        """
        lines = normalized_set(self._visible(requirements))
        self.root.mkdir(parents=True, exist_ok=True)
        version = python_version(self.python)
        if self.uv and lines:
            resolved = self._resolved(lines)
            key = cache_key(version + "\nuv", resolved)
        else:
            resolved = lines
            key = cache_key(version + ("\nuv" if self.uv else ""), lines)
        env = self.root / key
        if self._reuse(env, key):
            self.say(f"reusing cached environment {key[:12]} ({len(resolved)} packages)")
            return env
        with open(self.root / f"{key}.lock", "a") as lock:
            self._lock(lock, key=key)
            if (env / COMPLETE).exists():
                self.say(
                    f"reusing cached environment {key[:12]}, built meanwhile by another job ({len(resolved)} packages)"
                )
                return env
            # A sandboxed build happens in a scratch folder renamed into place when complete; a build on the host
            # happens in place, since the paths written into the env's scripts must be the ones jobs use.
            building = self.root / f".build-{key}" if self.builder.sandboxed else env
            shutil.rmtree(building, ignore_errors=True)
            shutil.rmtree(env, ignore_errors=True)  # what a build that died left
            try:
                self._build(building, key=key, lines=resolved)
                (building / COMPLETE).write_text(key + "\n")
                if building != env:
                    os.rename(building, env)
            except BaseException:
                shutil.rmtree(building, ignore_errors=True)
                raise
        return env

    def _reuse(self, env: Path, key: str) -> bool:
        """Is the env complete? If so its last use is now: under a shared lock on its key, which eviction
        (evict_unused) takes exclusively, so an env is never removed between this answer and the job's use."""
        if not (env / COMPLETE).exists():
            return False
        with open(self.root / f"{key}.lock", "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_SH)
            try:
                os.utime(env / COMPLETE)
            except FileNotFoundError:
                return False  # evicted meanwhile: built again
            return True

    def _visible(self, lines: list[str]) -> list[str]:
        """``file://`` references as a build sandbox sees them: each file at /portal/files/<hash of its path>/."""
        if not self.builder.sandboxed:
            return list(lines)
        seen = []
        for line in lines:
            for path in local_files([line]):
                self.files[path] = sandbox_path(path)
                line = line.replace(f"file://{path}", f"file://{sandbox_path(path)}")
            seen.append(line)
        return seen

    # -- resolving

    def _resolved(self, lines: list[str]) -> list[str]:
        wanted = hashlib.sha256("\n".join(lines).encode()).hexdigest()
        memo = self.root / "resolved" / f"{wanted}.json"
        try:
            known = json.loads(memo.read_text())
            if time.time() - known["at"] < self.resolve_ttl:
                return known["resolved"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        scratch = self._scratch("resolve")
        try:
            (scratch / "requirements.in").write_text("".join(f"{line}\n" for line in lines))
            self.say(f"resolving {len(lines)} requirements")
            work = self._at(scratch, WORK_AT)
            code, tail = self._run(
                [
                    self._uv_at(),
                    "pip",
                    "compile",
                    "--python",
                    self.python,
                    "--no-header",
                    "--no-annotate",
                    "--quiet",
                    f"{work}/requirements.in",
                    "-o",
                    f"{work}/resolved.txt",
                ],
                lines=lines,
                scratch=scratch,
            )
            if code != 0:
                raise BuildFailed(f"resolving requirements failed (uv exit code {code}):\n{tail}")
            resolved = requirement_lines((scratch / "resolved.txt").read_text())
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        memo.parent.mkdir(exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"requirements": lines, "resolved": resolved, "at": time.time()}))
        os.replace(tmp, memo)
        return resolved

    # -- building

    def _build(self, env: Path, *, key: str, lines: list[str]) -> None:
        self.say(f"building environment {key[:12]} ({len(lines)} packages)")
        env.mkdir(parents=True)
        self._own(env)
        scratch = self._scratch("install")
        try:
            env_at = self._at(env, ENV_AT)
            if self.uv:
                code, tail = self._run(
                    [self._uv_at(), "venv", "--quiet", "--python", self.python, env_at],
                    lines=lines,
                    scratch=scratch,
                    env_dir=env,
                )
            else:
                code, tail = self._run([self.python, "-m", "venv", env_at], lines=lines, scratch=scratch, env_dir=env)
            if code != 0:
                raise BuildFailed(f"creating the virtualenv failed (exit code {code}):\n{tail}")
            if lines:
                (scratch / "requirements.txt").write_text("".join(f"{line}\n" for line in lines))
                for line in lines:
                    self.say(f"  {line}")
                requirements = f"{self._at(scratch, WORK_AT)}/requirements.txt"
                if self.uv:
                    argv = [self._uv_at(), "pip", "install", "--python", f"{env_at}/bin/python", "-r", requirements]
                else:
                    argv = [
                        f"{env_at}/bin/python",
                        "-m",
                        "pip",
                        "install",
                        "--no-input",
                        "--disable-pip-version-check",
                        "--progress-bar",
                        "off",
                        "-r",
                        requirements,
                    ]
                code, tail = self._run(argv, lines=lines, scratch=scratch, env_dir=env)
                if code != 0:
                    raise BuildFailed(
                        f"installing requirements failed ({'uv' if self.uv else 'pip'} exit code {code}):\n{tail}"
                    )
            if self.uv:
                for name in ("pip", "pip3"):
                    shim = env / "bin" / name
                    if not shim.exists():
                        shim.write_text(PIP_SHIM)
                        shim.chmod(0o755)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self.say(f"environment {key[:12]} ready")

    # -- running a step

    def _run(self, argv: list[str], *, lines: list[str], scratch: Path, env_dir: Path | None = None) -> tuple[int, str]:
        cache = self.root / ".cache"
        cache.mkdir(exist_ok=True)
        self._own(cache)
        binds = [Bind(str(scratch), WORK_AT, writable=True), Bind(str(cache), CACHE_AT, writable=True)]
        if env_dir is not None:
            binds.append(Bind(str(env_dir), ENV_AT, writable=True))
        if self.uv:
            binds.append(Bind(self.uv, "/portal/bin/uv"))
        binds += [
            Bind(host, path) for host, path in self.files.items() if path in "\n".join(lines) and os.path.exists(host)
        ]
        env = {
            "UV_CACHE_DIR": self._at(cache, CACHE_AT),
            "UV_NO_PROGRESS": "1",
            "UV_PYTHON_DOWNLOADS": "never",
            "UV_LINK_MODE": "copy",
            "PIP_NO_INPUT": "1",
            "PIP_CACHE_DIR": self._at(cache, CACHE_AT) + "/pip",
        }
        return self.builder.run(argv, binds=binds, env=env)

    def _at(self, host: Path, inside: str) -> str:
        return inside if self.builder.sandboxed else str(host)

    def _uv_at(self) -> str:
        return "/portal/bin/uv" if self.builder.sandboxed else self.uv

    def _scratch(self, what: str) -> Path:
        scratch = self.root / f".{what}-{os.getpid()}-{time.monotonic_ns()}"
        scratch.mkdir(parents=True)
        self._own(scratch)
        return scratch

    def _own(self, path: Path) -> None:
        if self.owner is not None:
            os.chown(path, *self.owner)

    def _lock(self, lock, *, key: str) -> None:
        # Non-blocking attempts, so that a job waiting behind another's build can still be cancelled.
        said = False
        while True:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if not said:
                self.say(f"waiting for another job that is building environment {key[:12]}")
                said = True
            self.checkpoint()
            time.sleep(0.05)
