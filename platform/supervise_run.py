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

import signal
import subprocess
import sys


def main() -> int:
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
