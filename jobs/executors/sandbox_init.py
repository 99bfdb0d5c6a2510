"""The first process of a local job: ``python -I -S sandbox_init.py <workers.json>``, standard library only.

Owns the workers of one job from the inside: it starts each worker's command (``bash -c``) in a process group
of its own, with the environment and folder the runner prepared in workers.json, copies what each worker
prints (a pipe) into its log (an fd the runner opened), records each worker's exit code in
``exit_dir/worker-<rank>`` as it exits, passes SIGTERM (and SIGINT, SIGHUP) on to every worker group that is
still alive, and exits once every worker has.

The copy is where a log's cap (``log_max_bytes``, PORTAL_JOB_LOG_MAX_BYTES) holds: past it, a line says the log
was cut and the rest of the output is read and dropped, so the job goes on while its log stops growing. The
worker never holds the log's fd, and this process makes itself non-dumpable so that a job running as the same
uid can neither ptrace it nor open its fds through /proc.

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
import selectors
import signal
import subprocess
import sys
import time


def _write_exit(exit_dir: str, rank: int, code: int) -> None:
    tmp = os.path.join(exit_dir, f".worker-{rank}.tmp")
    with open(tmp, "w") as f:
        f.write(f"{code}\n")
    os.replace(tmp, os.path.join(exit_dir, f"worker-{rank}"))


class Relay:
    """One worker's output: from its pipe into its log, up to ``cap`` bytes of log."""

    def __init__(self, pipe: int, log_fd: int, cap: int | None):
        self.pipe, self.log_fd, self.cap = pipe, log_fd, cap
        self.size = os.fstat(log_fd).st_size  # the setup output the runner wrote before
        self.dropped, self.cut, self.summed_up = 0, False, False
        os.set_blocking(pipe, False)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.log_fd, view) :]
            except OSError:  # a full disk: the job goes on, the rest of its output is lost
                return

    def copy(self, data: bytes) -> None:
        room = len(data) if self.cap is None else max(0, self.cap - self.size)
        if room:
            self._write(data[:room])
            self.size += min(room, len(data))
        if len(data) > room:
            if not self.cut:
                self.cut = True
                self._write(
                    f"\n[portal] log cut: it reached {self.cap:,} bytes (PORTAL_JOB_LOG_MAX_BYTES); the job goes "
                    f"on, but what it prints from here on is not kept\n".encode()
                )
            self.dropped += len(data) - room

    def pump(self, *, to_end: bool = False) -> bool:
        """Copy what the pipe holds (``to_end``: until it is empty, or a few times a pipe's worth if something
        left behind keeps writing); False once every writer closed it."""
        for _ in range(64 if to_end else 1):
            try:
                data = os.read(self.pipe, 1 << 16)
            except BlockingIOError:
                return True
            except InterruptedError:
                continue
            if not data:
                return False
            self.copy(data)
        return True

    def summary(self) -> None:
        """Once its worker has exited, before its exit code is written: how much was dropped after the cut."""
        if self.cut and not self.summed_up:  # what leftovers print later is dropped unannounced
            self.summed_up = True
            self._write(f"[portal] {self.dropped:,} bytes of output after the cut were dropped\n".encode())

    def close(self) -> None:
        for fd in (self.pipe, self.log_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


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
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the job cannot ptrace us nor reach our fds
        if not pid_1:
            libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
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
    relays: dict[int, Relay] = {}  # rank -> its output's copy into its log
    cap = plan.get("log_max_bytes")
    for worker in plan["workers"]:
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        relays[worker["rank"]] = Relay(read_end, worker["log_fd"], cap)
        try:
            proc = subprocess.Popen(
                ["bash", "-c", worker["command"]],
                cwd=worker["cwd"],
                env=worker["env"],
                stdin=subprocess.DEVNULL,
                stdout=write_end,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            os.close(write_end)
        workers[proc.pid] = (worker["rank"], proc)
        groups[worker["rank"]] = proc.pid
        if stopping:  # a stop asked while we were still starting workers
            forward(stopping[0], None)
    # The worker process groups, for a runner that must kill them without a sandbox around them.
    tmp = os.path.join(plan["exit_dir"], ".groups.tmp")
    with open(tmp, "w") as f:
        json.dump({str(rank): pid for rank, pid in groups.items()}, f)
    os.replace(tmp, os.path.join(plan["exit_dir"], "groups.json"))
    watching = selectors.DefaultSelector()
    for relay in relays.values():
        watching.register(relay.pipe, selectors.EVENT_READ, relay)
    left = len(workers)
    while left:
        for key, _ in watching.select(timeout=0.05):
            if not key.data.pump():
                watching.unregister(key.fd)
        while left:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                left = 0
                break
            except InterruptedError:
                continue
            if not pid:
                break
            entry = workers.get(pid)
            if entry is None:
                continue  # an orphan that came to us
            rank, proc = entry
            code = os.waitstatus_to_exitcode(status)
            proc.returncode = code
            relays[rank].pump(to_end=True)  # what it printed before it exited is in its log before its exit code
            relays[rank].summary()
            _write_exit(plan["exit_dir"], rank, code if code >= 0 else 128 - code)
            left -= 1
    for relay in relays.values():
        relay.pump(to_end=True)
        relay.close()
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
