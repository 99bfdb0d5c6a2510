"""The first process of a local job: ``python -I -S sandbox_init.py <workers.json>``, standard library only.

Owns the workers of one job from the inside: it starts each worker's command (``bash -c``) in a process group
of its own, with the environment, folder and log (an inherited fd) the runner prepared in workers.json,
records each worker's exit code in ``exit_dir/worker-<rank>`` as it exits, passes SIGTERM (and SIGINT,
SIGHUP) on to every worker group that is still alive, and exits once every worker has.

In a sandbox it is the PID namespace's init (bwrap --as-pid-1): when it exits, the kernel kills whatever the
workers left behind (a ``setsid`` daemon included), so a job ends whole. Without a sandbox (the trusted
``isolation: none`` mode) it is the subreaper of its workers' orphans and kills what is left before it exits.
It never looks at the job's state: the runner, outside, judges endings and decides when to stop.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time


def _write_exit(exit_dir: str, rank: int, code: int) -> None:
    tmp = os.path.join(exit_dir, f".worker-{rank}.tmp")
    with open(tmp, "w") as f:
        f.write(f"{code}\n")
    os.replace(tmp, os.path.join(exit_dir, f"worker-{rank}"))


def _children_of(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
                if int(data[data.rindex(b")") + 2 :].split()[1]) == pid:
                    found.append(int(name))
    return found


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        plan = json.load(f)
    pid_1 = os.getpid() == 1
    if not pid_1:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    workers: dict[int, tuple[int, subprocess.Popen]] = {}  # pid -> (rank, process)
    stopping = []
    groups: dict[int, int] = {}

    def forward(signum, _frame):
        stopping.append(signum)
        for _rank, proc in workers.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    log_fds = set()
    for worker in plan["workers"]:
        log_fds.add(worker["log_fd"])
        proc = subprocess.Popen(
            ["bash", "-c", worker["command"]],
            cwd=worker["cwd"],
            env=worker["env"],
            stdin=subprocess.DEVNULL,
            stdout=worker["log_fd"],
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        workers[proc.pid] = (worker["rank"], proc)
        groups[worker["rank"]] = proc.pid
        if stopping:  # a stop asked while we were still starting workers
            forward(stopping[0], None)
    for fd in log_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    # The worker process groups, for a runner that must kill them without a sandbox around them.
    tmp = os.path.join(plan["exit_dir"], ".groups.tmp")
    with open(tmp, "w") as f:
        json.dump({str(rank): pid for rank, pid in groups.items()}, f)
    os.replace(tmp, os.path.join(plan["exit_dir"], "groups.json"))
    left = len(workers)
    while left:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        entry = workers.get(pid)
        if entry is None:
            continue  # an orphan that came to us
        rank, proc = entry
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code
        _write_exit(plan["exit_dir"], rank, code if code >= 0 else 128 - code)
        left -= 1
    if not pid_1:
        # What the workers left behind (reparented to us as their subreaper) ends with the job.
        for _ in range(200):  # each round reparents the next generation to us
            rest = _children_of(os.getpid())
            if not rest:
                break
            for pid in rest:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            time.sleep(0.02)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
