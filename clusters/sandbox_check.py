"""Whether this host can run jobs in a bubblewrap sandbox: what is missing or refused, in words a person can act on.

Pure of Django, so that the cluster page, the `demo` command and anything else can ask. It runs a real
(empty) sandbox once, because an installed `bwrap` still fails where user namespaces are switched off or
a container forbids them; the answer is kept for the life of the process, as the host does not change.
"""

from __future__ import annotations

import functools
import shutil
import subprocess

TOOLS = {
    "bwrap": "install the Debian package bubblewrap",
    "slirp4netns": "install the Debian package slirp4netns (it gives each job its own network)",
}
TRIAL_TIMEOUT_SECONDS = 10


@functools.cache
def sandbox_problems() -> list[str]:
    """Why jobs cannot be sandboxed on this host; empty when they can. Cached per process."""
    problems = [f"`{tool}` is not on PATH: {fix}." for tool, fix in TOOLS.items() if shutil.which(tool) is None]
    bwrap = shutil.which("bwrap")
    if bwrap is not None:
        problem = _trial(bwrap)
        if problem:
            problems.append(problem)
    return problems


def _trial(bwrap: str) -> str:
    command = [
        bwrap,
        "--unshare-all",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        "/usr/bin/true",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TRIAL_TIMEOUT_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return f"An empty bubblewrap sandbox did not finish within {TRIAL_TIMEOUT_SECONDS} s."
    except OSError as exc:
        return f"bubblewrap could not be run: {exc}."
    if done.returncode == 0:
        return ""
    detail = done.stderr.strip() or f"exit status {done.returncode}"
    return (
        f"bubblewrap cannot create a sandbox here ({detail}); user namespaces may be switched off "
        "(sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces) or forbidden by a container."
    )
