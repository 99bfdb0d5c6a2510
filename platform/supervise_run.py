"""`make run`'s foreground launcher (started by platform/supervise.sh): supervisord, then, once every program has
stopped, the TensorBoards and model servers they started (``manage.py stop_servers``). Stdlib only; not part of
the portal's Python packages.

Why not the shell: a shell started with SIGINT ignored (a make or CI run in the background) cannot trap it, so
Ctrl-C or a SIGINT to the launcher would never reach supervisord. Python can set a handler for a signal that
was ignored at start. Ctrl-C in a terminal reaches supervisord too (the same process group); a signal sent to
the launcher alone is passed on as SIGTERM. Job supervisors are left running on purpose: a job keeps running
across a restart and the next run's worker adopts it again.
"""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import subprocess
import sys


def append_to_output() -> None:
    """When this launcher's output is a regular file (``make run > run.log``, a test's log), write to it in append
    mode from now on. supervisord prints its own log on its stdout (inherited from here), while the ``output``
    listener's lines reach the same file through ``/dev/fd/1`` opened again in append mode (supervisord.conf): two
    handles on one file. Without O_APPEND on the inherited one, its writes land at its own offset and overwrite
    the lines the listener appended (a program's first line went missing). A terminal or a pipe has no offset."""
    for fd in (1, 2):
        if stat.S_ISREG(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)


def main() -> int:
    append_to_output()
    supervisord = subprocess.Popen(
        [".venv/bin/supervisord", "--configuration", "platform/supervisord.conf", "--nodaemon"]
    )

    def pass_on(signum, frame) -> None:
        if supervisord.poll() is None:
            supervisord.send_signal(signal.SIGTERM)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, pass_on)
    status = supervisord.wait()
    print("supervise: every program stopped; stopping the TensorBoards and model servers they started", flush=True)
    stopped = subprocess.run([sys.executable, "manage.py", "stop_servers"], check=False)
    return status or stopped.returncode


if __name__ == "__main__":
    sys.exit(main())
