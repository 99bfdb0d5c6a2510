"""Process bookkeeping for local jobs: what /proc says about a process, and ending process groups.

Owns reading /proc (proc_stat, start_time, alive, live_groups), telling whether a recorded group
{"pgid", "starttime"} is still the job's (ours, immune to PID reuse), signalling and killing groups
with a grace period (signal_group, kill_groups), reaping exited children (reap) and making the
runner the subreaper of its workers' orphans (become_subreaper). Used by the runner and, through
conclude_unsupervised, by LocalExecutor; it knows nothing of a job's directory. Detached servers
(TensorBoards, model servers) are started, stopped and read with start_detached, stop_detached, log_tail.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

TICK = 0.05  # seconds between looks at workers, cancel requests and deadlines


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state letter, process group, start time in clock ticks) of a process, None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()  # the command name may contain spaces and ')'
    return fields[0].decode(), int(fields[2]), int(fields[19])


def start_time(pid: int) -> int | None:
    stat = proc_stat(pid)
    return stat[2] if stat else None


def alive(pid: int, started: int | None = None) -> bool:
    """Is ``pid`` a running process (not a zombie), and the same one that started at ``started``?"""
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in "ZX" and (started is None or stat[2] == started)


def live_groups() -> set[int]:
    """Process groups with at least one process that is not a zombie.

    os.killpg(pgid, 0) also succeeds for a group of zombies, which stay forever where init does not
    reap, so the only reliable answer is a look at every process.
    """
    groups = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = proc_stat(int(name))
            if stat and stat[0] not in "ZX":
                groups.add(stat[1])
    return groups


def ours(group: dict, live: set[int]) -> bool:
    """Is the recorded group still alive and still the job's (not a reused PID)?"""
    if group["pgid"] not in live:
        return False
    leader = proc_stat(group["pgid"])
    # A live group whose leader is gone cannot have had its id reused; a live leader must be ours.
    return leader is None or leader[0] in "ZX" or leader[2] == group["starttime"]


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def reap(children: dict | None = None) -> None:  # pid -> local_endings.Worker
    """Collect every exited child: our workers, and orphans that came to us as their subreaper."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        worker = (children or {}).get(pid)
        if worker is not None:
            worker.code = os.waitstatus_to_exitcode(status)
            if worker.proc is not None:
                worker.proc.returncode = worker.code  # we reaped it, so Popen must not try


def kill_groups(groups: list[dict], *, grace: float, children: dict | None = None, after_kill: float = 10) -> None:
    """SIGTERM the groups, give them ``grace`` seconds, SIGKILL what is left and wait until it is gone."""
    live = live_groups()
    groups = [g for g in groups if ours(g, live)]
    if not groups:
        return
    for group in groups:
        signal_group(group["pgid"], signal.SIGTERM if grace > 0 else signal.SIGKILL)
    deadline = time.monotonic() + grace
    while True:
        reap(children)
        left = [g for g in groups if g["pgid"] in live_groups()]
        if not left:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(TICK)
    for group in left:
        signal_group(group["pgid"], signal.SIGKILL)
    until = time.monotonic() + after_kill
    while time.monotonic() < until:
        reap(children)
        if not any(g["pgid"] in live_groups() for g in left):
            return
        time.sleep(TICK)


def become_subreaper() -> None:
    """Orphans of the workers come to this runner, which reaps them, so their process groups end."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


# --- Detached servers (TensorBoards, model servers) ----------------------------------------------------

SERVER_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")  # nothing of the portal's secrets or databases


def start_detached(argv: list[str], *, log: Path, extra_env: dict[str, str] | None = None) -> tuple[int, int | None]:
    """Start ``argv`` in the background with its output appended to ``log``; (pid, start time).

    sh starts it and exits at once, so the server is nobody's child here: it outlives the request or worker
    that started it and leaves no zombie behind. Raises OSError, ValueError or SubprocessError.
    """
    env = {name: value for name in SERVER_ENV if (value := os.environ.get(name))} | (extra_env or {})
    result = subprocess.run(
        ["sh", "-c", 'log=$1; shift; "$@" >>"$log" 2>&1 </dev/null & echo $!', "sh", str(log), *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,
        check=True,
        timeout=30,
        env=env,
    )
    pid = int(result.stdout.strip())
    return pid, start_time(pid)


def stop_detached(pid: int | None, started: int | None, *, grace: float) -> None:
    """SIGTERM the server's process group, wait up to ``grace`` seconds, then SIGKILL."""
    if pid is None or not alive(pid, started):
        return
    stat = proc_stat(pid)
    group = stat[1] if stat else pid
    signal_group(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(pid, started) and time.monotonic() < deadline:
        time.sleep(TICK)
    if alive(pid, started):
        signal_group(group, signal.SIGKILL)


def log_tail(path: Path, lines: int = 10) -> str:
    """The last lines a server printed, to say why it died ("" if there is no log)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
