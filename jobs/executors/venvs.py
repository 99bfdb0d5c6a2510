"""The virtualenv cache of the local executor: one env per distinct requirement set, built once, reused.

Owns ``<root>/envs``: the cache key, the per-key build lock and building an env with
``python -m venv --without-pip`` + ``pip --python``. It knows nothing about jobs: the runner passes in
how to run a command (so that a cancel can stop it) and where setup lines go (the job's logs).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

# Written last: an env without it is a build that died half-way and is never used.
# (Building elsewhere and renaming would break the absolute paths pip writes into the env's scripts.)
COMPLETE = ".portal-complete"

# pip's comment rule: '#' at the start of a line or after whitespace ('#' inside a URL is not a comment).
_COMMENT = re.compile(r"(^|\s)#.*$")


class BuildFailed(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def requirement_lines(text: str) -> list[str]:
    """The requirements of a requirements.txt, without comments and blank lines."""
    lines = (_COMMENT.sub("", line).strip() for line in text.splitlines())
    return [line for line in lines if line]


def normalize(line: str) -> str:
    """One spelling per requirement, so that ``Foo>=1`` and ``foo >= 1`` share an env."""
    try:
        requirement = Requirement(line)
    except InvalidRequirement:
        # pip options (-r, --extra-index-url ...) and anything pip alone understands: kept verbatim.
        return " ".join(line.split())
    requirement.name = canonicalize_name(requirement.name)
    return str(requirement)


def normalized_set(lines: Iterable[str]) -> list[str]:
    return sorted({normalize(line) for line in lines if line.strip()})


def cache_key(python_version: str, requirements: list[str]) -> str:
    """sha256 over the interpreter version and the normalized, sorted requirement set."""
    text = "\n".join([python_version.strip(), *normalized_set(requirements)])
    return hashlib.sha256(text.encode()).hexdigest()


def python_version(python: str) -> str:
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return sys.version
    done = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise BuildFailed(f"{python} does not run: {done.stderr.strip()}")
    return done.stdout


Run = Callable[[list[str]], tuple[int, str]]  # argv -> (exit code, last lines of its output)


def ensure(
    envs: Path,
    *,
    python: str,
    requirements: list[str],
    run: Run,
    say: Callable[[str], None],
    checkpoint: Callable[[], None],
) -> Path:
    """The env for ``requirements``, built now if no job built it before.

    ``checkpoint`` is called while waiting for another job's build of the same set; it raises to give up
    (a cancel). Raises BuildFailed when venv or pip fails; a failed build leaves nothing behind.
    """
    lines = normalized_set(requirements)
    key = cache_key(python_version(python), lines)
    env = envs / key
    if (env / COMPLETE).exists():
        say(f"reusing cached environment {key[:12]} ({len(lines)} requirements)")
        return env
    envs.mkdir(parents=True, exist_ok=True)
    with open(envs / f"{key}.lock", "a") as lock:
        _lock(lock, say=say, key=key, checkpoint=checkpoint)
        if (env / COMPLETE).exists():
            say(f"reusing cached environment {key[:12]}, built meanwhile by another job ({len(lines)} requirements)")
            return env
        shutil.rmtree(env, ignore_errors=True)  # what a build that died left
        try:
            _build(env, key=key, python=python, lines=lines, run=run, say=say)
        except BaseException:
            shutil.rmtree(env, ignore_errors=True)
            raise
        (env / COMPLETE).write_text(key + "\n")
    return env


def _lock(lock, *, say, key: str, checkpoint: Callable[[], None]) -> None:
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
            say(f"waiting for another job that is building environment {key[:12]}")
            said = True
        checkpoint()
        time.sleep(0.05)


def _build(env: Path, *, key: str, python: str, lines: list[str], run: Run, say) -> None:
    say(f"building environment {key[:12]} ({len(lines)} requirements)")
    code, tail = run([python, "-m", "venv", "--without-pip", str(env)])
    if code != 0:
        raise BuildFailed(f"creating the virtualenv failed (exit code {code}):\n{tail}")
    if not lines:
        return
    requirements_file = env / "portal-requirements.txt"
    requirements_file.write_text("".join(f"{line}\n" for line in lines))
    for line in lines:
        say(f"  {line}")
    code, tail = run([
        python, "-m", "pip", "--python", str(env / "bin" / "python"), "install",
        "--no-input", "--disable-pip-version-check", "--progress-bar", "off", "-r", str(requirements_file),
    ])
    if code != 0:
        raise BuildFailed(f"installing requirements failed (pip exit code {code}):\n{tail}")
    say(f"environment {key[:12]} ready")
